"""The engine's fast paths answer exactly as their plain definitions: the grouped pre-filter, the
compiled exclusion patterns, ModuleAnalysis' call indexes, parent map and enclosing_function, and
the collector pause around each file. Each reference below is the straightforward version."""

from __future__ import annotations

import ast
import gc
import os
from fnmatch import fnmatch
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddpdoctor.lint import LintConfig, lint_source
from ddpdoctor.lint.files import (
    _COMM,
    _DIST,
    DDP_HELPERS,
    GETTER_ZERO,
    MAIN_TESTS,
    PER_NODE,
    RANK_ZERO,
    SAVE_HELPERS,
    STRONG,
    UNWRAP,
    decode,
    discover,
    worth_parsing,
)
from ddpdoctor.script.analysis import ModuleAnalysis
from ddpdoctor.script.names import dist_op, dotted, is_torch_name

HERE = Path(__file__).parent
SOURCES = sorted((HERE / "corpus").glob("*.py")) + sorted((HERE / "fixtures").glob("*.py"))


def _reference_worth_parsing(data: bytes) -> bool:
    if any(t in data for t in STRONG):
        return True
    if any(t in data for t in DDP_HELPERS) and any(t in data for t in MAIN_TESTS):
        return True
    if b"barrier(" in data and any(t in data for t in MAIN_TESTS if t != b"rank"):
        return True
    if b"rank" in data and PER_NODE in data:
        return True
    if any(t in data for t in GETTER_ZERO):
        return True
    if b"rank" in data and UNWRAP in data and any(t in data for t in RANK_ZERO):
        return True
    if b"rank" in data and any(t in data for t in SAVE_HELPERS) and any(t in data for t in RANK_ZERO):
        return True
    if b"all_reduce" in data and (b"backward(" in data or b"loss_scaler(" in data):
        return True
    return b"rank" in data and any(t in data for t in _DIST) and any(t in data for t in _COMM)


# every token, its parts and near misses, so the generated texts cross each branch of the filter
_PIECES = sorted(
    {t for t in STRONG + _DIST + _COMM + DDP_HELPERS + MAIN_TESTS + (b"barrier(",)}
    | {t[: len(t) // 2] for t in STRONG + _DIST + _COMM + DDP_HELPERS + MAIN_TESTS + (b"barrier(",)}
    | {t[len(t) // 2 :] for t in STRONG + _DIST + _COMM + DDP_HELPERS + MAIN_TESTS + (b"barrier(",)}
    | {b"rank", b"istributed", b"NCCL_", b"NCCL", b"distributed", b"local", b" ", b"\n", b"x", PER_NODE, b"per_", UNWRAP, b".module", *RANK_ZERO, *GETTER_ZERO, b"get_rank()", b"rank ==", *SAVE_HELPERS, b"save_", b"backward(", b"loss_scaler(", b"backward"}
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_PIECES), max_size=12))
def test_prefilter_matches_trying_every_token(pieces):
    data = b"".join(pieces)
    assert worth_parsing(data) == _reference_worth_parsing(data), data


def test_prefilter_on_the_corpus_and_on_single_tokens():
    for p in SOURCES:
        data = p.read_bytes()
        assert worth_parsing(data) == _reference_worth_parsing(data), p
    for t in STRONG:
        assert worth_parsing(b"x = 1\n" + t + b"\n")
    assert worth_parsing(b"import torch.distributed\nrank\nbarrier")
    assert not worth_parsing(b"import torch.distributed\nbarrier")  # no rank
    assert not worth_parsing(b"rank = 0\nbarrier")  # no torch.distributed, no call of a barrier
    assert worth_parsing(b"if distr.is_global_main:\n    pass\ndistr.barrier()")  # a project's wrapper
    assert worth_parsing(b"model = ddp_wrap(model)\nif ctx.is_main:\n    pass")
    # a trainer module with no torch.distributed: a rank taken modulo a node's GPU count
    assert worth_parsing(b"if args.rank % ngpus_per_node == 0:\n    save()")
    assert not worth_parsing(b"ngpus_per_node = 8")  # no rank
    # a training engine that all-reduces its metrics through a helper: no rank, no torch.distributed
    assert worth_parsing(b"loss_scaler(loss, optimizer)\nmisc.all_reduce_mean(loss_value)")
    assert not worth_parsing(b"loss.backward()\noptimizer.step()")


def _reference_discover(paths: list[str], exclude: tuple[str, ...]) -> list[Path]:
    def excluded(path: Path) -> bool:
        return any(fnmatch(path.name, p) or fnmatch(str(path), p) for p in exclude)

    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_file():
            out.append(p)
            continue
        for root, dirs, files in os.walk(p):
            rootp = Path(root)
            dirs[:] = sorted(d for d in dirs if not excluded(rootp / d))
            out.extend(
                rootp / f for f in sorted(files) if f.endswith((".py", ".pyi")) and not excluded(rootp / f)
            )
    return out


@pytest.mark.parametrize(
    "exclude",
    [(), LintConfig().exclude, ("*test*",), ("*/b/*", "*.pyi"), ("a", "c.py"), ("[ab]*", "*/x?/*")],
)
def test_discovery_excludes_as_fnmatch_does(tmp_path, exclude):
    for rel in (
        "a/b/c.py",
        "a/b/d.pyi",
        "a/x1/e.py",
        "b/test_f.py",
        "build/g.py",
        "c.py",
        "c.txt",
        "x/.venv/h.py",
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x = 1\n")
    for roots in ([str(tmp_path)], [str(tmp_path) + "/", str(tmp_path / "c.py")], [str(tmp_path / "a")]):
        assert discover(roots, exclude) == _reference_discover(roots, exclude), (roots, exclude)


def _module(path: Path) -> ModuleAnalysis | None:
    text = decode(path.read_bytes())
    try:
        return ModuleAnalysis(str(path), text, ast.parse(text))
    except SyntaxError:
        return None


def _reference_by_type(tree: ast.AST) -> dict[type, list]:
    """The walk as first written: every field but the operator/context singletons, checked by type."""
    skip = {"ctx", "op", "ops", "type_comment", "kind", "type_ignores"}
    out: dict[type, list] = {}
    stack: list = [tree]
    while stack:
        node = stack.pop()
        if not isinstance(node, ast.AST):
            continue
        out.setdefault(type(node), []).append(node)
        for name in node._fields:
            v = getattr(node, name, None)
            if name in skip:
                continue
            if isinstance(v, list):
                stack.extend(v)
            elif isinstance(v, ast.AST):
                stack.append(v)
    for nodes in out.values():
        nodes.reverse()
    return out


_NAMES = ("DataLoader", "DistributedSampler", "DistributedDataParallel", "torch.save", "torch.load", "save")
_OPS = (("send", "recv", "isend", "irecv"), ("init_process_group",), ("get_rank", "barrier"), ("all_reduce",))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_call_indexes_match_a_scan_of_every_call(path):
    m = _module(path)
    if m is None:
        return
    calls = m.calls
    for names in [(n,) for n in _NAMES] + [_NAMES]:
        want = [
            c
            for c, q in calls
            if q is not None and (q in names or any(is_torch_name(q, n) for n in names if "." not in n))
        ]
        assert m.calls_named(*names) == want, names
    for ops in _OPS:
        assert m.dist_calls(*ops) == [c for c, q in calls if dist_op(q) in ops], ops
    for attr in ("set_epoch", "step", "wait", "add_argument", "backward"):
        want = [c for c, _ in calls if isinstance(c.func, ast.Attribute) and c.func.attr == attr]
        assert m.method_calls(attr) == want, attr
    for fn in m.functions:
        cls = m.parents.get(fn)
        if isinstance(cls, ast.ClassDef) and fn.name == "__init__":  # `Logger(...)` runs it
            want = [c for c, _ in calls if (dotted(c.func) or "").rsplit(".", 1)[-1] == cls.name]
            assert m.call_sites(fn) == want, cls.name
            continue
        want = [c for c, _ in calls if (dotted(c.func) or "").rsplit(".", 1)[-1] == fn.name]
        if isinstance(cls, ast.ClassDef):  # a method: not `self.model.train()`
            want = [
                c for c in want if not (dotted(getattr(c.func, "value", c.func)) or "").startswith("self.")
            ]
        else:  # a function: by its name, or through a module (not `model.train()`)
            want = [
                c
                for c in want
                if not isinstance(c.func, ast.Attribute)
                or (dotted(c.func.value) or "").split(".", 1)[0] in m.aliases
            ]
        assert m.call_sites(fn) == want, fn.name


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_walk_parents_and_enclosing_function_match_ast_walk(path):
    m = _module(path)
    if m is None:
        return
    assert m.by_type == _reference_by_type(m.tree)  # the same nodes in the same order
    singletons = (ast.expr_context, ast.operator, ast.cmpop, ast.boolop, ast.unaryop)
    every = [n for n in ast.walk(m.tree) if not isinstance(n, singletons)]
    assert sorted(map(id, every)) == sorted(id(n) for nodes in m.by_type.values() for n in nodes)
    parents = {child: node for node in ast.walk(m.tree) for child in ast.iter_child_nodes(node)}
    for n in every:
        assert m.parents.get(n) is parents.get(n)
    by_body = sorted(m.functions, key=lambda f: (f.body[0].lineno, f.body[0].col_offset))
    for node in [c for c, _ in m.calls] + m.functions:
        want = None
        for fn in by_body:  # the innermost def whose body holds the node, by a full scan
            b = fn.body[0]
            if (b.lineno, b.col_offset) > (node.lineno, node.col_offset):
                break
            if fn is not node and (fn.end_lineno, fn.end_col_offset) >= (
                node.end_lineno,
                node.end_col_offset,
            ):
                want = fn
        assert m.enclosing_function(node) is want


def test_collector_is_back_as_it_was_after_each_file():
    src = "import torch.distributed as dist\ndist.init_process_group()\nif dist.get_rank() == 0:\n    dist.barrier()\n"
    assert gc.isenabled()
    assert [f.code for f in lint_source("t.py", src)] == ["DDP301"]
    assert gc.isenabled()
    broken = lint_source("bad.py", "import torch.distributed as dist\ndist.init_process_group(\n")
    assert broken[0].evidence["kind"] == "syntax"
    assert gc.isenabled()
    gc.disable()
    try:
        lint_source("t.py", src)
        assert not gc.isenabled()  # a caller that turned it off keeps it off
    finally:
        gc.enable()


def _reference_enclosing_statements(m, node) -> list:
    """By the parent map: compound statements of node's own function whose body (or else, handler,
    finally, case) holds it, outermost first. A lambda is no function of its own here: it runs only
    where the statement that makes it runs (``if rank == 0: on(event, lambda _: save())``)."""
    out = []
    child = node
    for a in m.ancestors(node):
        if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and child not in a.decorator_list:
            break  # (a decorator runs where the def statement runs)
        if isinstance(a, (ast.ExceptHandler, ast.match_case)):
            child = a
            continue
        if isinstance(a, ast.stmt):
            blocks = [getattr(a, f, None) or [] for f in ("body", "orelse", "finalbody")]
            blocks += [[h] for h in getattr(a, "handlers", ())] + [[c] for c in getattr(a, "cases", ())]
            if any(child in b for b in blocks):
                out.append(a)
            else:
                out.clear()  # in the header: the statements around it still count, not this one
        child = a
    return list(reversed(out))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_enclosing_statements_match_the_parent_map(path):
    from ddpdoctor.script.writers import enclosing_statements

    text = path.read_text()
    m = ModuleAnalysis(str(path), text, ast.parse(text))
    for node in [c for c, _ in m.calls]:
        assert enclosing_statements(m, node) == _reference_enclosing_statements(m, node), (
            path.name,
            node.lineno,
        )


def test_chunks_hold_every_file_once_biggest_first(tmp_path):
    from ddpdoctor.lint.engine import _CHUNKS_PER_JOB, _chunks

    sizes = [5000, 3, 700, 0, 12, 4000, 90, 90, 1] + list(range(40))
    files = []
    for i, n in enumerate(sizes):
        p = tmp_path / f"f{i}.py"
        p.write_bytes(b"x" * n)
        files.append(p)
    files.append(tmp_path / "gone.py")  # unreadable: size 0, still linted (and reported)
    for jobs in (1, 2, 3):
        chunks = _chunks(files, jobs)
        flat = [f for c in chunks for f in c]
        assert sorted(flat) == sorted(map(str, files))  # each file exactly once
        got = [Path(f).stat().st_size if Path(f).exists() else 0 for f in flat]
        assert got == sorted(got, reverse=True)  # biggest first, so costly files start early
        assert chunks[0] == [str(files[0])]  # a file over a chunk's share goes alone
        assert len(chunks) <= jobs * _CHUNKS_PER_JOB + 1


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_memoised_predicate_kinds_match_a_fresh_answer(path):
    """guard_kind remembers what each local predicate (``is_main_process()``) returns: every test of
    a file answered in turn on one analysis equals the answer on a fresh analysis of that test alone."""
    from ddpdoctor.script.ranks import guard_kind, strict_rank_kind

    shared = _module(path)
    if shared is None:
        return
    tests = [n.test for n in shared.nodes(ast.If, ast.While)]
    for i, test in enumerate(tests):
        fresh = _module(path)
        fresh_test = [n.test for n in fresh.nodes(ast.If, ast.While)][i]
        assert guard_kind(shared, test) == guard_kind(fresh, fresh_test), (path.name, test.lineno)
        fresh_call = fresh_test if isinstance(fresh_test, ast.Call) else None
        if fresh_call is not None:
            assert strict_rank_kind(shared, test) == strict_rank_kind(fresh, fresh_call)


def _reference_dotted(expr) -> str | None:
    parts = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    return ".".join(reversed([*parts, expr.id])) if isinstance(expr, ast.Name) else None


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_dotted_fast_paths_match_the_plain_chain_walk(path):
    m = _module(path)
    if m is None:
        return
    for node in ast.walk(m.tree):
        assert dotted(node) == _reference_dotted(node), ast.dump(node)[:80]


@pytest.mark.parametrize("kind", ["script", "cluster"])
def test_discovery_by_kind_skips_only_modules_of_other_kinds(kind):
    """discover(kind=...) reads each built-in check's source and imports only the ones declaring that
    KIND: the same checks as importing them all and filtering."""
    from ddpdoctor.registry import discover as discover_checks

    every = [s for s in discover_checks() if s.kind == kind]
    assert [(s.code, s.module) for s in discover_checks(kind=kind)] == [(s.code, s.module) for s in every]
    assert every


def test_lint_imports_no_cluster_check():
    import json
    import subprocess
    import sys

    code = (
        "import json, sys; from ddpdoctor.lint.rules import script_rules; script_rules(); "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('ddpdoctor.checks.'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = [m.rsplit(".", 1)[-1] for m in json.loads(out)]
    assert loaded and all(m.startswith(("ddp", "_")) for m in loaded), loaded


_WORD_PIECES = ["isend", "send", "irecv", "recv", "batch_isend_irecv", "P2POp", "x", "_", "i", "é", " ", "\n", "(", "."]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_WORD_PIECES), max_size=10))
def test_p2p_word_lines_match_the_word_boundary_regex(pieces):
    import re

    from ddpdoctor.script.p2p_exchange import _P2P_WORD, _lines_matching

    text = "".join(pieces)
    plain = re.compile(r"\b(?:i?send|i?recv|batch_isend_irecv|P2POp)\b")
    want = [text.count("\n", 0, m.start()) + 1 for m in plain.finditer(text)]
    assert _lines_matching(_P2P_WORD, text) == want, text
    names = re.compile(r"(?:send|x_recv)\s*\(")
    plain_names = re.compile(r"\b(?:send|x_recv)\s*\(")
    assert _lines_matching(names, text) == [text.count("\n", 0, m.start()) + 1 for m in plain_names.finditer(text)]


def test_module_names_as_pathlib_gives_them():
    from ddpdoctor.lint.project import _module_names

    def reference(f: Path, bases: list[Path]) -> list[str]:
        parts = list(f.with_suffix("").parts)
        for b in bases:
            try:
                rel = f.relative_to(b)
            except ValueError:
                continue
            parts = list(rel.with_suffix("").parts)
            break
        if parts and parts[-1] == "__init__":
            parts = parts[:-1]
        parts = [p for p in parts if p not in ("", ".", "..", os.sep)]
        return [".".join(parts[i:]) for i in range(len(parts)) if all(p.isidentifier() for p in parts[i:])]

    files = [*SOURCES, Path("a/b/.py"), Path("x/__init__.pyi"), Path("/abs/p/q.tar.py"), Path("c..py"), Path("d.")]
    files += [Path(os.path.abspath(p)) for p in SOURCES[:5]]
    for roots in ([], ["."], [str(HERE)], [os.path.abspath(HERE)], ["tests", str(HERE / "corpus")], ["/abs"]):
        for f in files:
            assert _module_names(f, [Path(r).parts for r in roots]) == reference(f, [Path(r) for r in roots])


def _walk_holds_global_source(m, expr) -> bool:
    """DDP402's question answered the plain way: a walk of the expression."""
    from ddpdoctor.checks.ddp402_global_rank_device import (
        _GLOBAL_ENV,
        _fallback_of_local,
        _imported_rank_getter,
    )

    if any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) for n in ast.walk(expr)):
        return False
    from ddpdoctor.script.ranks import GLOBAL, rank_kind

    own = {f.name for f in m.functions}
    for n in ast.walk(expr):
        if isinstance(n, ast.Call) and dist_op(m.qualname(n.func)) in ("get_rank", "get_global_rank"):
            return True
        # the file's own getter of the global rank (`rank = get_rank()`), or a project's imported one
        getter = isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and not n.args
        if getter and (n.func.id in own or _imported_rank_getter(n.func.id, m.qualname(n.func))):
            if rank_kind(m, n) == GLOBAL:
                return True
        if isinstance(n, ast.Constant) and n.value in _GLOBAL_ENV:
            # (not the fallback of a LOCAL_RANK read: `environ.get("LOCAL_RANK", environ.get("RANK"))`)
            if isinstance(m.parents.get(n), (ast.Subscript, ast.Call)) and not _fallback_of_local(m, n):
                return True
    return False


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_ddp402_source_index_matches_a_walk_of_each_expression(path):
    from ddpdoctor.checks.ddp402_global_rank_device import _has_mod, _is_global_source

    text = decode(path.read_bytes())
    m = ModuleAnalysis(str(path), text, ast.parse(text))
    for expr in ast.walk(m.tree):
        if not isinstance(expr, ast.expr):
            continue
        assert _is_global_source(m, expr) == _walk_holds_global_source(m, expr), ast.unparse(expr)
        has_mod = any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) for n in ast.walk(expr))
        assert _has_mod(m, expr) == has_mod, ast.unparse(expr)


_SINGLETONS = (ast.expr_context, ast.operator, ast.cmpop, ast.boolop, ast.unaryop, ast.type_ignore)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_nodes_walk_is_ast_walk_without_the_singletons(path):
    from ddpdoctor.script.nodes import child_nodes, walk

    m = _module(path)
    if m is None:
        return
    for top in [m.tree, *m.tree.body, *m.functions]:
        assert list(walk(top)) == [n for n in ast.walk(top) if not isinstance(n, _SINGLETONS)]
    for n in walk(m.tree):
        assert child_nodes(n) == [c for c in ast.iter_child_nodes(n) if not isinstance(c, _SINGLETONS)]


_WORDS = (("CUDA_VISIBLE_DEVICES", False), ("grad", True), ("rank", True), ("module", False))
_TRICKY = (
    'os.environ["CUDA_VISIBLE_DEVICES"]',
    '"CUDA_VISIBLE" "_DEVICES"',
    '"CUDA\\x5fVISIBLE_DEVICES"',
    'b"CUDA_VISIBLE_DEVICES"',
    'f"{x}CUDA_VISIBLE_DEVICES{y!r:>{w}}"',
    "x.CUDA_VISIBLE_DEVICES",
    "f(CUDA_VISIBLE_DEVICES=1)",
    "lambda CUDA_VISIBLE_DEVICES: 0",
    'reduce_GRADS(p) if "Grad\\n" else "\\rad"',
    "average(p.grad.data)",
    '"g\\rad"',
)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_may_show_is_false_only_where_the_unparsed_text_lacks_the_word(path):
    from ddpdoctor.script.nodes import may_show

    m = _module(path)
    exprs = [n for n in ast.walk(m.tree) if isinstance(n, ast.expr)] if m is not None else []
    exprs += [ast.parse(t, mode="eval").body for t in _TRICKY]
    for e in exprs:
        text = ast.unparse(e)
        for word, fold in _WORDS:
            if word in (text.lower() if fold else text):
                assert may_show(e, word, fold), (text, word)


_ANY_WORDS = (
    ("rank", "master", "main_process", "is_main", "global_zero", "rank_zero", "rank0", "is_local_main"),
    ("process_zero", "rank_zero_only", "is_chief"),
)
_ANY_TRICKY = (
    '"\\rank"',  # the text is '\\rank': an escape's letter starts the word
    'b"\\rank_zero_only"',
    'f"{x}\\rmaster{y!r}"',
    '"RANK" if IS_MAIN else Is_Chief',
    "ctx.is_main_process() and args.global_zero",
)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_may_show_any_is_false_only_where_the_unparsed_text_lacks_every_word(path):
    from ddpdoctor.script.nodes import may_show_any

    m = _module(path)
    exprs = [n for n in ast.walk(m.tree) if isinstance(n, ast.expr)] if m is not None else []
    exprs += [ast.parse(t, mode="eval").body for t in _ANY_TRICKY]
    for e in exprs:
        text = ast.unparse(e).lower()
        for words in _ANY_WORDS:
            if any(w in text for w in words):
                assert may_show_any(e, words, fold=True), (text, words)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_a_flow_asked_again_matches_a_fresh_one(path):
    from ddpdoctor.script.flow import Flow

    m = _module(path)
    if m is None:
        return
    other = _module(path)  # a second analysis of the same text: its flows start with an empty memo
    at = [i for i, (c, _q) in enumerate(m.calls) if (dotted(c.func) or "").endswith(("Sampler", "DataLoader"))]
    for picked in (at, at[:1], []):
        seeds = [m.calls[i][0] for i in picked]
        first, again = Flow(m, seeds), Flow(m, seeds)  # the second from the file's memo
        assert (again.holders, again.returns) == (first.holders, first.returns)
        Flow(other, [other.calls[i][0] for i in at])  # another flow first, in the other memo
        fresh = Flow(other, [other.calls[i][0] for i in picked], {"unrelated_name": 1})
        plain = Flow(m, seeds, {"unrelated_name": 1})
        assert (fresh.holders, fresh.returns) == (plain.holders, plain.returns)
