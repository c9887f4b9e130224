"""Neighbour exchanges of pipeline stages that both send first.

Pipeline code pairs two helpers in its steady state: stage i runs "send to the next stage, receive
from the next stage" while stage i+1 runs "send to the previous stage, receive from the previous
stage". If both helpers complete the send before they post the receive (a blocking ``send``, or a
``batch_isend_irecv`` of sends only that is waited), each stage waits in its send for a receive its
neighbour posts only after its own send: for tensors above the transport's eager size, a hang.

This walks each function of a module that names a neighbour and can reach a send or a receive
(both found from the text first, which keeps the walk off most code), with the peer left symbolic ("next" or "prev", from names such
as ``next_rank``, ``get_prev_rank()``, ``rank + 1``), following calls into the module's own functions
with their arguments (so ``helper(x, dst, None)`` walks only the send half of ``helper``), and
enumerates the paths through conditions it cannot decide. On each path the exchange with the peer
is ordered by the first blocking point that involves it: sends only ("send first"), receives only
("receive first") or both together (one batch, which cannot deadlock). A helper is reported only if
it has a send-first path and no receive-first path (so stage-parity ordering stays quiet) and its
counterpart for the other neighbour does the same. Pure AST; anything it cannot follow ends the walk
of that function without a verdict.
"""

from __future__ import annotations

import ast
import re
from bisect import bisect_left
from dataclasses import dataclass

from ddpdoctor.script.names import dist_op, dotted, qualify
from ddpdoctor.script.values import (
    FREE,
    NOT_NONE,
    UNKNOWN,
    Modelled,
    NotNone,
    bind_arguments,
    negation,
    truth_of,
    unknown_default,
)

MAX_PATHS = 256
MAX_DEPTH = 8
MAX_STEPS = 3000  # statements per entry function
MAX_WORK = 5000  # paths compared per entry function (the walk's real cost)
MAX_MODULE_WORK = 30000  # and per module: past it the remaining functions get no verdict


@dataclass(frozen=True)
class Peer(Modelled):
    side: str  # next | prev
    maybe_none: bool = False

    def truth(self) -> object:
        return UNKNOWN if self.maybe_none else True


@dataclass(frozen=True)
class OpFunc:
    dir: str  # send | recv


@dataclass(frozen=True)
class Op:
    dir: str
    peer: Peer


class OpList(Modelled):
    __slots__ = ("ops",)

    def __init__(self, ops=()):
        self.ops = list(ops)

    def truth(self) -> object:
        return bool(self.ops)


@dataclass(frozen=True)
class Reqs(Modelled):
    group: int  # index of the posted group

    def truth(self) -> object:
        return UNKNOWN  # ``if reqs:`` is not decided: the walk follows both arms


@dataclass
class Event:
    kind: str  # post | wait | block
    ops: tuple[Op, ...]
    chain: tuple[ast.AST, ...]  # the calls that led here (outermost first), then the op's node
    group: int = -1


class _GiveUp(Exception):
    pass


class State:
    """One path: the frames of the calls being walked (innermost last) and the events so far."""

    __slots__ = ("done", "events", "frames", "ret")

    def __init__(self, env: dict, events=None, done=False, ret=None):
        self.frames = [env]
        self.events = events if events is not None else []
        self.done = done
        self.ret = ret

    @property
    def env(self) -> dict:
        return self.frames[-1]

    def fork(self) -> State:
        lists: dict[int, OpList] = {}  # one copy per list, so aliases between frames stay aliases

        def cp(v):
            if isinstance(v, OpList):
                if id(v) not in lists:
                    lists[id(v)] = OpList(v.ops)
                return lists[id(v)]
            return v

        out = State({}, list(self.events), self.done, cp(self.ret))
        out.frames = [{k: cp(v) for k, v in f.items()} for f in self.frames]
        return out


def _side(name: str | None) -> str | None:
    """``next`` for ``next_rank``/``get_next_global_rank``/``next_stage``; None for ``recv_next``."""
    if not name:
        return None
    n = name.lower()
    if not any(w in n for w in ("rank", "stage", "peer", "dst", "src")):
        return None
    if "next" in n:
        return "next"
    if "prev" in n:
        return "prev"
    return None


def _peer_named(name: str, v: object) -> object:
    side = _side(name)
    return Peer(side) if side else v


def _key(v) -> object:
    """A hashable stand-in for a value (a list by its contents)."""
    if v is UNKNOWN or v is None or v.__class__ in (bool, int, Peer, Op, OpFunc, Reqs, NotNone):
        return v
    if isinstance(v, OpList):
        return ("L", tuple(v.ops))
    if isinstance(v, (list, tuple)):
        return tuple(_key(x) for x in v)
    try:
        hash(v)
    except TypeError:
        return id(v)
    return v


class Walker:
    """Walks functions of one module, path by path, recording their p2p events (see the module doc)."""

    def __init__(self, aliases: dict[str, str]):
        self.aliases = aliases
        self.top: dict[str, ast.FunctionDef] = {}
        self.methods: dict[ast.AST, dict[str, ast.FunctionDef]] = {}
        self.cls_of: dict[ast.AST, ast.ClassDef] = {}
        self.steps = 0
        self.work = 0
        self.module_work = 0
        self.groups = 0
        self.comm: set = set()  # the functions that may reach a send or a receive

    def index(self, tree: ast.Module) -> None:
        for st in tree.body:
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.top[st.name] = st
            elif isinstance(st, ast.ClassDef):
                ms = {s.name: s for s in st.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
                self.methods[st] = ms
                for s in ms.values():
                    self.cls_of[s] = st

    # -- entry ------------------------------------------------------------------------------
    def run(self, fn) -> list[State]:
        self.module_work += self.work
        if self.module_work > MAX_MODULE_WORK:
            raise _GiveUp()
        self.steps = 0
        self.work = 0
        env = bind_arguments(
            fn.args,
            [],
            {},
            unknown_default,
            {},
            ("self", self.cls_of[fn]) if fn in self.cls_of else FREE,
            _peer_named,
        )
        return self.block(fn.body, [State(env)], (), ())

    # -- statements ------------------------------------------------------------------------
    def block(self, body, states, chain, stack) -> list[State]:
        for st in body:
            live = [s for s in states if not s.done]
            if not live:
                break
            done = [s for s in states if s.done]
            states = done + self.stmt(st, live, chain, stack)
            states = self._dedup(states)
        return states

    def _dedup(self, states: list[State]) -> list[State]:
        """Paths with the same events and variables are one; a return value that differs between
        them (None on one, a tensor on the other) becomes unknown."""
        if len(states) < 2:
            return states
        self.work += len(states)
        if self.work > MAX_WORK:
            raise _GiveUp()
        seen: dict = {}
        for s in states:
            k = (
                _events_key(s.events),
                tuple(frozenset((n, _key(v)) for n, v in f.items() if v is not UNKNOWN) for f in s.frames),
                s.done,
                _key(s.ret) if isinstance(s.ret, (Peer, Reqs, Op)) or s.ret == "__break__" else None,
            )
            kept = seen.setdefault(k, s)
            if kept is not s and _key(kept.ret) != _key(s.ret):
                kept.ret = UNKNOWN
        out = list(seen.values())
        if len(out) > MAX_PATHS:
            raise _GiveUp()
        return out

    def stmt(self, st, states, chain, stack) -> list[State]:
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise _GiveUp()
        out: list[State] = []
        t = type(st)
        if t is ast.Expr:
            for s, _ in self.ev_each(st.value, states, chain, stack):
                out.append(s)
        elif t in (ast.Assign, ast.AnnAssign):
            if st.value is None:
                return states
            targets = st.targets if t is ast.Assign else [st.target]
            for s, v in self.ev_each(st.value, states, chain, stack):
                for tg in targets:
                    self.bind(tg, v, s)
                out.append(s)
        elif t is ast.AugAssign:
            for s in states:
                self.bind(st.target, UNKNOWN, s)
            out = states
        elif t is ast.If:
            for s, v in self.ev_each(st.test, states, chain, stack):
                tv = truth_of(v)
                if tv is True:
                    out += self.block(st.body, [s], chain, stack)
                elif tv is False:
                    out += self.block(st.orelse, [s], chain, stack)
                else:
                    yes = s.fork()
                    _refine(st.test, True, yes)
                    _refine(st.test, False, s)
                    out += self.block(st.body, [yes], chain, stack)
                    out += self.block(st.orelse, [s], chain, stack)
        elif t is ast.Assert:
            for s, v in self.ev_each(st.test, states, chain, stack):
                tv = truth_of(v)
                if tv is False:
                    continue  # this path contradicts what the code asserts: not a real path
                if tv is UNKNOWN:
                    _refine(st.test, True, s)
                out.append(s)
        elif t in (ast.For, ast.AsyncFor):
            for s, it in self.ev_each(st.iter, states, chain, stack):
                item = UNKNOWN
                if isinstance(it, Reqs):
                    item = it
                elif isinstance(it, OpList) and it.ops:
                    item = it.ops[0]
                self.bind(st.target, item, s)
                body = self.block(st.body, [s], chain, stack)
                for b in body:
                    if b.done and b.ret == "__break__":
                        b.done, b.ret = False, None
                out += self.block(st.orelse, body, chain, stack)
        elif t in (ast.While, ast.With, ast.AsyncWith):
            out = self.block(st.body, states, chain, stack)
        elif t is ast.Try:
            out = self.block(st.body, states, chain, stack)
            out = self.block(st.finalbody, out, chain, stack)
        elif t is ast.Return:
            if st.value is None:
                for s in states:
                    s.done, s.ret = True, None
                out = states
            else:
                for s, v in self.ev_each(st.value, states, chain, stack):
                    s.done, s.ret = True, v
                    out.append(s)
        elif t is ast.Raise:
            return []  # an error path: not a path a rank finishes
        elif t in (ast.Break, ast.Continue):
            for s in states:
                s.done, s.ret = True, "__break__"
            out = states
        else:
            out = states  # pass, assert, import, nested defs: nothing to follow
        return out

    def bind(self, target, v, s: State) -> None:
        if isinstance(target, ast.Name):
            s.env[target.id] = v
        elif isinstance(target, (ast.Tuple, ast.List)):
            for e in target.elts:
                self.bind(e.value if isinstance(e, ast.Starred) else e, UNKNOWN, s)

    # -- expressions (each may fork the path) ------------------------------------------------
    def ev_each(self, node, states, chain, stack) -> list[tuple[State, object]]:
        out = []
        for s in states:
            out += self.ev(node, s, chain, stack)
        return out

    def ev(self, node, s: State, chain, stack) -> list[tuple[State, object]]:
        t = type(node)
        if t is ast.Constant:
            return [(s, node.value if node.value is None or isinstance(node.value, (bool, int)) else UNKNOWN)]
        if t is ast.Name:
            if node.id in s.env:
                return [(s, s.env[node.id])]
            q = qualify(node.id, self.aliases)
            return [(s, self._dist_value(q))]
        if t is ast.Attribute:
            q = qualify(dotted(node), self.aliases) if dotted(node) else None
            v = self._dist_value(q)
            if v is not UNKNOWN:
                return [(s, v)]
            side = _side(node.attr)
            return [(s, Peer(side) if side else UNKNOWN)]
        if t is ast.List and not node.elts:
            return [(s, OpList())]
        if t is ast.Call:
            return self.call(node, s, chain, stack)
        if t is ast.BoolOp:
            return self._boolop(node, s, chain, stack)
        if t is ast.UnaryOp and isinstance(node.op, ast.Not):
            return [(s2, negation(v)) for s2, v in self.ev(node.operand, s, chain, stack)]
        if t is ast.Compare and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Is, ast.IsNot)):
            out = []
            for s2, a in self.ev(node.left, s, chain, stack):
                for s3, b in self.ev(node.comparators[0], s2, chain, stack):
                    r = UNKNOWN
                    if b is None:
                        if a is None:
                            r = True
                        elif isinstance(a, (Peer, OpList, OpFunc, Op, Reqs, NotNone)) and not (
                            isinstance(a, Peer) and a.maybe_none
                        ):
                            r = False
                    if r is not UNKNOWN and isinstance(node.ops[0], ast.IsNot):
                        r = not r
                    out.append((s3, r))
            return out
        if t is ast.Compare and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Gt, ast.Eq, ast.NotEq)):
            out = []
            for s2, a in self.ev(node.left, s, chain, stack):
                for s3, b in self.ev(node.comparators[0], s2, chain, stack):
                    r = UNKNOWN
                    if isinstance(a, int) and isinstance(b, int) and not isinstance(a, bool):
                        op = {ast.Gt: int.__gt__, ast.Eq: int.__eq__, ast.NotEq: int.__ne__}[
                            type(node.ops[0])
                        ]
                        r = op(a, b)
                    out.append((s3, r))
            return out
        if t is ast.IfExp:
            out = []
            for s2, c in self.ev(node.test, s, chain, stack):
                tv = truth_of(c)
                if tv is True:
                    out += self.ev(node.body, s2, chain, stack)
                elif tv is False:
                    out += self.ev(node.orelse, s2, chain, stack)
                else:
                    a = self.ev(node.body, s2.fork(), chain, stack)
                    b = self.ev(node.orelse, s2, chain, stack)
                    out += (
                        [(x, _join(v, w)) for (x, v), (_, w) in zip(a, b)]
                        if len(a) == len(b) == 1
                        else [(x, UNKNOWN) for x, _ in a + b]
                    )
            return out
        if t in (ast.ListComp, ast.GeneratorExp) and len(node.generators) == 1:
            g = node.generators[0]
            out = []
            for s2, it in self.ev(g.iter, s, chain, stack):
                if isinstance(it, Reqs) and isinstance(g.target, ast.Name):
                    s2.env[g.target.id] = it  # [req.wait() for req in reqs]
                    out += [(x, UNKNOWN) for x, _ in self.ev(node.elt, s2, chain, stack)]
                else:
                    out.append((s2, UNKNOWN))
            return out
        if t is ast.BinOp and isinstance(node.op, (ast.Add, ast.Sub, ast.Mod)):
            return self._arith(node, s, chain, stack)
        # anything else: evaluate calls inside it for their effects, the value is unknown
        states = [s]
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr) and any(isinstance(n, ast.Call) for n in ast.walk(child)):
                states = [x for st in states for x, _ in self.ev(child, st, chain, stack)]
        return [(x, UNKNOWN) for x in states]

    def _boolop(self, node, s, chain, stack):
        is_and = isinstance(node.op, ast.And)
        pending = [(s, is_and)]
        for val in node.values:
            nxt = []
            for st, acc in pending:
                if acc is (not is_and):  # decided already
                    nxt.append((st, acc))
                    continue
                for st2, v in self.ev(val, st, chain, stack):
                    tv = truth_of(v)
                    if is_and:
                        r = False if tv is False else (UNKNOWN if (tv is UNKNOWN or acc is UNKNOWN) else True)
                    else:
                        r = True if tv is True else (UNKNOWN if (tv is UNKNOWN or acc is UNKNOWN) else False)
                    nxt.append((st2, r))
            pending = nxt
        return pending

    def _arith(self, node, s, chain, stack):
        out = []
        for s2, a in self.ev(node.left, s, chain, stack):
            for s3, b in self.ev(node.right, s2, chain, stack):
                v = UNKNOWN
                if isinstance(node.op, ast.Mod) and isinstance(a, Peer):
                    v = a  # (rank + 1) % world_size
                elif isinstance(node.right, ast.Constant) and node.right.value == 1 and _is_rank(node.left):
                    v = Peer("next" if isinstance(node.op, ast.Add) else "prev")
                elif isinstance(a, int) and isinstance(b, int) and not isinstance(a, bool):
                    v = (
                        a + b
                        if isinstance(node.op, ast.Add)
                        else (a - b if isinstance(node.op, ast.Sub) else UNKNOWN)
                    )
                out.append((s3, v))
        return out

    def _dist_value(self, q: str | None) -> object:
        op = dist_op(q)
        if op in ("isend", "send"):
            return OpFunc("send")
        if op in ("irecv", "recv"):
            return OpFunc("recv")
        return UNKNOWN

    # -- calls ---------------------------------------------------------------------------------
    def _args(self, node, s, chain, stack):
        """[(state, positional values, keyword values)] with every argument evaluated in order."""
        pending = [(s, [], {})]
        for a in node.args:
            if isinstance(a, ast.Starred):
                raise _GiveUp()
            pending = [(x, [*pos, v], kw) for st, pos, kw in pending for x, v in self.ev(a, st, chain, stack)]
        for k in node.keywords:
            if k.arg is None:
                raise _GiveUp()
            pending = [
                (x, pos, {**kw, k.arg: v})
                for st, pos, kw in pending
                for x, v in self.ev(k.value, st, chain, stack)
            ]
        return pending

    def call(self, node: ast.Call, s: State, chain, stack) -> list[tuple[State, object]]:
        func = node.func
        name = dotted(func)
        q = qualify(name, self.aliases) if name else None
        op = dist_op(q)
        last = name.rsplit(".", 1)[-1] if name else None
        if isinstance(func, ast.Attribute) and func.attr in ("append", "wait"):
            out = []
            for s2, base in self.ev(func.value, s, chain, stack):
                for s3, pos, _kw in self._args(node, s2, chain, stack):
                    if func.attr == "append" and isinstance(base, OpList) and pos and isinstance(pos[0], Op):
                        base.ops.append(pos[0])
                    elif func.attr == "wait" and isinstance(base, Reqs):
                        ev = next((e for e in s3.events if e.kind == "post" and e.group == base.group), None)
                        if ev is not None and not any(
                            e.kind == "wait" and e.group == base.group for e in s3.events
                        ):
                            s3.events.append(Event("wait", ev.ops, ev.chain, base.group))
                    out.append((s3, UNKNOWN))
            return out
        results = []
        for s2, pos, kw in self._args(node, s, chain, stack):
            results += self._call_with(node, q, op, last, pos, kw, s2, chain, stack)
        return results

    def _call_with(self, node, q, op, last, pos, kw, s, chain, stack):
        here = (*chain, node)
        if op in ("send", "recv"):
            peer = kw.get("dst" if op == "send" else "src", pos[1] if len(pos) > 1 else UNKNOWN)
            if isinstance(peer, Peer):
                s.events.append(Event("block", (Op(op, peer),), here))
            return [(s, None)]
        if op in ("isend", "irecv"):
            peer = kw.get("dst" if op == "isend" else "src", pos[1] if len(pos) > 1 else UNKNOWN)
            self.groups += 1
            if isinstance(peer, Peer):
                s.events.append(Event("post", (Op(op[1:], peer),), here, self.groups))
            return [(s, Reqs(self.groups))]
        if op == "batch_isend_irecv":
            ops = pos[0] if pos else kw.get("p2p_op_list", UNKNOWN)
            self.groups += 1
            if isinstance(ops, OpList):
                s.events.append(Event("post", tuple(ops.ops), here, self.groups))
            return [(s, Reqs(self.groups))]
        if last == "P2POp":
            fn = pos[0] if pos else kw.get("op", UNKNOWN)
            peer = pos[2] if len(pos) > 2 else kw.get("peer", UNKNOWN)
            if isinstance(fn, OpFunc) and isinstance(peer, Peer):
                return [(s, Op(fn.dir, Peer(peer.side)))]
            return [(s, UNKNOWN)]
        if last == "isinstance" and len(node.args) == 2 and "Tensor" in (dotted(node.args[1]) or ""):
            return [(s, True)]  # the payload is taken to be one tensor (a list is the same ops again)
        if last == "len" and pos and isinstance(pos[0], OpList):
            return [(s, len(pos[0].ops))]
        if last and last.startswith("get") and _side(last):
            return [(s, Peer(_side(last)))]  # get_next_rank(), get_prev_global_rank(mode)
        target = self._resolve(node, s)
        if target is None or target[0] not in self.comm:
            return [(s, UNKNOWN)]  # not ours, or a function that cannot reach a send or a receive
        fn, bound = target
        frame = self._bind(fn, bound, pos, kw)
        key = (fn, frozenset((k, _key(v)) for k, v in frame.items()))
        if key in stack:
            return [(s, UNKNOWN)]
        if len(stack) >= MAX_DEPTH:
            raise _GiveUp()
        s.frames.append(frame)
        out = []
        for r in self.block(fn.body, [s], here, (*stack, key)):
            ret = r.ret if r.done and r.ret != "__break__" else None
            r.frames.pop()
            r.done, r.ret = False, None
            out.append((r, ret))
        return out

    def _resolve(self, node, s):
        func = node.func
        if isinstance(func, ast.Name) and func.id not in s.env and func.id in self.top:
            return self.top[func.id], None
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            base = s.env.get(func.value.id)
            if isinstance(base, tuple) and len(base) == 2 and base[0] == "self":
                m = self.methods.get(base[1], {}).get(func.attr)
                if m is not None:
                    return m, base
        return None

    def _bind(self, fn, bound, pos, kw) -> dict:
        return bind_arguments(fn.args, pos, kw, _constant, {}, FREE if bound is None else bound)


def _constant(e: ast.expr) -> object:
    """A default's value: None, a bool or an int written as such; anything else is unknown."""
    if isinstance(e, ast.Constant) and (e.value is None or isinstance(e.value, (bool, int))):
        return e.value
    return UNKNOWN


def _is_none_test(test: ast.AST) -> bool:
    """``name is None`` or ``name is not None``."""
    return (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], (ast.Is, ast.IsNot))
        and isinstance(test.left, ast.Name)
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value is None
    )


def _refine(test: ast.AST, value: bool, s: State) -> None:
    """What a path learns from taking a branch: ``if flag and x is None`` true sets both."""
    env = s.env
    if isinstance(test, ast.Name):
        if env.get(test.id, UNKNOWN) is UNKNOWN or env.get(test.id) is NOT_NONE:
            env[test.id] = value
    elif isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        _refine(test.operand, not value, s)
    elif _is_none_test(test):
        is_none = value if isinstance(test.ops[0], ast.Is) else not value
        cur = env.get(test.left.id, UNKNOWN)
        if cur is UNKNOWN or cur is NOT_NONE:
            env[test.left.id] = None if is_none else NOT_NONE
    elif isinstance(test, ast.BoolOp):
        conj = isinstance(test.op, ast.And)
        if value == conj:  # a true ``and`` or a false ``or``: every part has that value
            for v in test.values:
                _refine(v, value, s)
        else:  # a false ``and`` (true ``or``): known only when all other parts are known true (false)
            open_parts = [v for v in test.values if _static_truth(v, s) is not conj]
            if len(open_parts) == 1:
                _refine(open_parts[0], value, s)


def _static_truth(test: ast.AST, s: State) -> object:
    """The truth of a simple condition from the path's variables alone (no calls)."""
    env = s.env
    if isinstance(test, ast.Name):
        return truth_of(env.get(test.id, UNKNOWN))
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return negation(_static_truth(test.operand, s))
    if _is_none_test(test):
        v = env.get(test.left.id, UNKNOWN)
        if v is None:
            r = True
        elif isinstance(v, (Peer, OpList, NotNone)) and not (isinstance(v, Peer) and v.maybe_none):
            r = False
        else:
            return UNKNOWN
        return r if isinstance(test.ops[0], ast.Is) else not r
    if isinstance(test, ast.BoolOp):
        parts = [_static_truth(v, s) for v in test.values]
        if isinstance(test.op, ast.And):
            return False if False in parts else (True if all(p is True for p in parts) else UNKNOWN)
        return True if True in parts else (False if all(p is False for p in parts) else UNKNOWN)
    return UNKNOWN


def _events_key(events: list[Event]) -> tuple:
    """The events with group ids renumbered in order of appearance (ids differ between paths)."""
    ids: dict[int, int] = {}
    raw = [(e.kind, e.ops, ids.setdefault(e.group, len(ids))) for e in events]
    out: list = []
    i = 0
    while i < len(raw):  # a posted group waited at once is one blocking step; repeats of a step are one
        k, ops, g = raw[i]
        if k == "post" and i + 1 < len(raw) and raw[i + 1][0] == "wait" and raw[i + 1][2] == g:
            tok, i = ("block", ops), i + 2
        else:
            tok, i = (k, ops, g) if k != "block" else (k, ops), i + 1
        if not out or out[-1] != tok:
            out.append(tok)
    return tuple(out)


def _join(a, b):
    """The value of ``a if ? else b``."""
    if _key(a) == _key(b):
        return a
    if isinstance(a, Peer) and b is None:
        return Peer(a.side, True)
    if isinstance(b, Peer) and a is None:
        return Peer(b.side, True)
    return UNKNOWN


def _is_rank(node) -> bool:
    name = dotted(node.func) if isinstance(node, ast.Call) else dotted(node)
    n = (name or "").lower().rsplit(".", 1)[-1]
    return n in (
        "rank",
        "global_rank",
        "stage",
        "stage_id",
        "pipe_rank",
        "pp_rank",
        "get_rank",
        "stage_index",
    )


@dataclass
class Exchange:
    fn: ast.FunctionDef
    side: str
    send: Event  # the blocking point that completes the send first
    recv: Event  # a later receive from the same neighbour


def _order(events: list[Event], side: str):
    """On one path, the exchange with the ``side`` neighbour: ("send"|"recv", the first blocking
    point, a later event with the opposite direction), ("both", ...) or None."""
    posted: dict[int, list[Op]] = {}  # posted, not yet waited, by group
    first_kind = first = None
    for e in events:
        ops = [o for o in e.ops if o.peer.side == side]
        if first_kind is None:
            if e.kind == "post":
                if ops:
                    posted[e.group] = ops
                continue
            if e.kind == "wait":
                posted.pop(e.group, None)
            if not ops:
                continue
            dirs = {o.dir for o in ops} | {o.dir for g in posted.values() for o in g}
            if len(dirs) == 2:
                return ("both", e, None)
            first_kind, first = dirs.pop(), e
            continue
        other = "recv" if first_kind == "send" else "send"
        if any(o.dir == other for o in ops):
            return first_kind, first, e
    return None


_HIT = re.compile("next|prev")
_WORD = re.compile(r"\w*")
_ARITH = re.compile(r"(?:rank|stage)\w*\s*[-+]\s*1\b")


def neighbour_lines(source: str) -> list[int]:
    """Lines that name a neighbour stage (``next_rank``, ``get_prev_rank``): a pass over the text
    for ``next``/``prev``, each hit widened to its identifier; cheaper than visiting every name."""
    text = source.lower()
    out: list[int] = []
    line, pos, last_end = 1, 0, -1
    for m in _HIT.finditer(text):
        if m.start() < last_end:
            continue
        start = m.start()
        while start > 0 and (text[start - 1].isalnum() or text[start - 1] == "_"):
            start -= 1
        end = _WORD.match(text, m.end()).end()
        last_end = end
        if _side(text[start:end]):
            line += text.count("\n", pos, start)
            pos = start
            out.append(line)
    for m in _ARITH.finditer(text):  # rank + 1, self.stage - 1
        out.append(text.count("\n", 0, m.start()) + 1)
    return sorted(out)


# Words, found where a match starts a word. The patterns leave out the leading ``\b``: a pattern
# that starts with a word lets the regex engine skip ahead to its first letters, about four times
# faster on a big file; a match inside a longer word is dropped here instead (it spans word letters
# only, so it never hides a match that starts a word).
_P2P_WORD = re.compile(r"(?:isend|send|irecv|recv|batch_isend_irecv|P2POp)\b")


def _lines_matching(pattern: re.Pattern, text: str) -> list[int]:
    out, line, pos = [], 1, 0
    for m in pattern.finditer(text):
        start = m.start()
        if start and (text[start - 1].isalnum() or text[start - 1] == "_"):
            continue  # not at the start of a word
        line += text.count("\n", pos, start)
        pos = start
        out.append(line)
    return out


def _containing(functions: list, lines: list[int]) -> set:
    out = set()
    for fn in functions:
        i = bisect_left(lines, fn.lineno)
        if i < len(lines) and lines[i] <= getattr(fn, "end_lineno", fn.lineno):
            out.add(fn)
    return out


def communicating(functions: list, source: str) -> set:
    """The functions whose text names a p2p operation, and those that call them by name (from the
    text: cheaper than walking every function's tree, and a superset is harmless)."""
    comm = _containing(functions, _lines_matching(_P2P_WORD, source))
    names: set[str] = set()
    for _ in range(8):
        new = {f.name for f in comm} - names
        if not new:
            break
        names |= new
        called = re.compile(r"(?:" + "|".join(sorted(map(re.escape, new))) + r")\s*\(")
        comm |= _containing([f for f in functions if f not in comm], _lines_matching(called, source))
    return comm


def send_first_exchanges(
    tree: ast.Module, functions: list, aliases: dict[str, str], source: str
) -> list[Exchange]:
    lines = neighbour_lines(source)
    if not lines:
        return []
    w = Walker(aliases)
    w.index(tree)
    w.comm = communicating(functions, source)
    found: list[Exchange] = []
    for fn in functions:
        if fn not in w.comm:
            continue
        end = getattr(fn, "end_lineno", fn.lineno)
        i = bisect_left(lines, fn.lineno)
        if i == len(lines) or lines[i] > end:
            continue  # speaks of no neighbour stage
        try:
            paths = w.run(fn)
        except (_GiveUp, RecursionError):
            continue
        for side in ("next", "prev"):
            send_first = None
            recv_first = False
            for p in paths:
                r = _order(p.events, side)
                if r is None:
                    continue
                if r[0] == "recv":
                    recv_first = True
                elif r[0] == "send" and send_first is None:
                    send_first = r
            if send_first is not None and not recv_first:
                found.append(Exchange(fn, side, send_first[1], send_first[2]))
    return found


def split_points(x: Exchange) -> tuple[ast.AST, ast.AST]:
    """Where the send and the later receive part: the first calls (from the helper down) they do
    not share, the send's and the receive's."""
    a, b = x.send.chain, x.recv.chain
    for i, node in enumerate(a):
        if i >= len(b) or b[i] is not node:
            return node, b[min(i, len(b) - 1)]
    return a[-1], b[-1]


def neighbour_deadlocks(
    tree: ast.Module, functions: list, aliases: dict[str, str], source: str
) -> list[tuple[Exchange, Exchange]]:
    """(next-side exchange, prev-side exchange) pairs that both send first: the two halves a
    stage and its successor run at the same time."""
    found = send_first_exchanges(tree, functions, aliases, source)
    nxt = [x for x in found if x.side == "next"]
    prv = [x for x in found if x.side == "prev"]
    if not nxt or not prv:
        return []
    out = []
    seen: set[int] = set()
    for down in nxt:  # one pair per place where a send completes before its receive is posted
        point = split_points(down)[0]
        if id(point) in seen:
            continue
        seen.add(id(point))
        same = [x for x in prv if split_points(x)[0] is point]
        out.append((down, same[0] if same else prv[0]))
    return out
