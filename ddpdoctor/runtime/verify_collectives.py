"""`watch --verify`: our own collective fingerprint check, in the rank (torch is imported here).

Every collective called through ``torch.distributed`` is wrapped: before the real call, the rank
writes the call's fingerprint (operation, input shapes and dtypes, root, the user's path:line; see
model/hang/fingerprint.py) into its slot of the job's store (group, our sequence number modulo
SLOTS, rank) and reads the other members' slots. The rank that finds every peer's fingerprint of the
same number compares; on a difference it records the finding and raises before entering the
collective, so the job stops with the mismatch named instead of hanging (NCCL) or aborting (gloo). A
rank that does not find them all goes on at once: the store is never waited on, so a rank that
never arrives leaves a hang in the real collective for the hang doctor to name. A collective let
through that then fails looks for its peers' fingerprints for a moment (AFTER_FAILURE_S) and names
the mismatch behind the failure.

Cost: two store round trips per collective (set, multi_get of the peers' slots), once a group's
slots exist (a check before that). TORCH_DISTRIBUTED_DEBUG=DETAIL does the same inside torch but crashes DDP's
constructor on torch 2.13 CPU builds (SIGSEGV, seen here), so --verify no longer sets it.
"""

from __future__ import annotations

import json
import sys
import threading
import time

from ddpdoctor.model.hang.fingerprint import CallPrint, CollectiveMismatch, compare
from ddpdoctor.runtime.verify_base import forward_step, record_finding

C10D_MODULE = "torch.distributed.distributed_c10d"
KEY = "ddpdoctor-verify/"
MISMATCH_KEY = KEY + "mismatch"  # the first mismatch found, for the ranks that did not find it
AFTER_FAILURE_S = 3.0  # how long a failed collective waits for its peers' fingerprints
STATE: dict = {}  # "fingerprints": this rank's Fingerprints, once patched
SLOTS = 16  # call N of a group goes in the rank's slot N % SLOTS: the store holds SLOTS keys per rank

# op -> (its input tensor(s): name, position), (root: name, position, group-relative name), group position
_SPEC: dict[str, tuple[tuple[str, int] | None, tuple[str, int, str] | None, int]] = {
    "all_reduce": (("tensor", 0), None, 2),
    "broadcast": (("tensor", 0), ("src", 1, "group_src"), 2),
    "reduce": (("tensor", 0), ("dst", 1, "group_dst"), 3),
    "all_gather": (("tensor", 1), None, 2),
    "all_gather_into_tensor": (("input_tensor", 1), None, 2),
    "gather": (("tensor", 0), ("dst", 2, "group_dst"), 3),
    "scatter": (("tensor", 0), ("src", 2, "group_src"), 3),
    "reduce_scatter": (("output", 0), None, 3),
    "reduce_scatter_tensor": (("input", 1), None, 3),
    "all_to_all": (("input_tensor_list", 1), None, 2),
    "all_to_all_single": (("input", 1), None, 4),
    "barrier": (None, None, 0),
}


class CollectiveMismatchError(RuntimeError):
    """Raised in the rank instead of running a collective its group's ranks disagree on."""


def _arg(args: tuple, kwargs: dict, name: str, pos: int):
    if name in kwargs:
        return kwargs[name]
    return args[pos] if pos < len(args) else None


def _describe(t) -> tuple[list[str], list[str]]:
    items = t if isinstance(t, (list, tuple)) else [t]
    shapes, dtypes = [], []
    for x in items:
        if hasattr(x, "shape") and hasattr(x, "dtype"):
            shapes.append("x".join(str(int(d)) for d in x.shape))
            dtypes.append(str(x.dtype).replace("torch.", ""))
    return shapes, dtypes


class Fingerprints:
    """Per-rank state: our count of collectives per group, the members of each group."""

    def __init__(self, agent, c10d) -> None:
        self.agent = agent
        self.c10d = c10d
        self.lock = threading.Lock()
        self.seq: dict[str, int] = {}
        self.members: dict[str, list[int]] = {}
        self.reported = False  # one collective mismatch per rank: the job stops at the first
        self.slots_made: set[str] = set()  # groups whose slots this rank has created
        self.ready: dict[str, set[int]] = {}  # group -> peers whose slots were seen to exist

    def check(self, op: str, args: tuple, kwargs: dict) -> tuple[CallPrint, list[str]] | None:
        """Fingerprint this call into the store and compare when every peer's is there; (our print,
        the peers' keys) for a check after a failure, None when the call is not checked."""
        c10d = self.c10d
        tensor_spec, root_spec, group_pos = _SPEC[op]
        group = _arg(args, kwargs, "group", group_pos)
        if not c10d.is_initialized() or c10d._rank_not_in_group(group):
            return None
        pg = group if group is not None else c10d._get_default_group()
        name = c10d._get_process_group_name(pg)
        label = "default_pg" if pg is c10d._get_default_group() else f"group {name}"
        members = self.members.get(name)
        if members is None:
            members = self.members[name] = list(c10d.get_process_group_ranks(pg))
        if len(members) < 2:
            return None
        with self.lock:
            seq = self.seq[name] = self.seq.get(name, 0) + 1
        shapes, dtypes = _describe(_arg(args, kwargs, *tensor_spec)) if tensor_spec else ([], [])
        root = None
        if root_spec is not None:
            root = _arg(args, kwargs, root_spec[0], root_spec[1])
            local = kwargs.get(root_spec[2])
            if root is None and isinstance(local, int):
                root = members[local] if 0 <= local < len(members) else local
        frame, api = _caller(sys._getframe(2))
        where = (frame.f_code.co_filename, frame.f_lineno) if frame is not None else ("?", 0)
        me = c10d.get_rank()
        mine = CallPrint(me, label, seq, op, tuple(shapes), tuple(dtypes), None if root is None else int(root),
                         where[0], where[1], api, forward_step())  # fmt: skip
        store = c10d._get_default_store()
        prefix = f"{KEY}{name}/"
        slot = seq % SLOTS
        if name not in self.slots_made:  # our slots exist from here on: a read of them never blocks
            store.multi_set([f"{prefix}{k}/{me}" for k in range(SLOTS)], [""] * SLOTS)
            self.slots_made.add(name)
        store.set(f"{prefix}{slot}/{me}", mine.encode())
        others = [r for r in members if r != me]
        peers = [f"{prefix}{slot}/{r}" for r in others]
        ready = self.ready.setdefault(name, set())
        if len(ready) < len(others):  # a peer's slots may not exist yet: look first (never wait)
            ready.update(r for r, k in zip(others, peers) if r not in ready and store.check([k]))
        if len(ready) == len(others):
            self._compare(store, mine, peers)
        return mine, peers

    def _compare(self, store, mine: CallPrint, peers: list[str]) -> bool:
        """False while a peer's slot still holds an earlier call (it has not got here); raise
        CollectiveMismatchError when the peers' fingerprints differ from ours (every rank that
        compares says the same; the first finding is also left in the store for the others)."""
        prints = [mine]
        for raw in store.multi_get(peers):
            p = CallPrint.decode(raw) if raw else None
            if p is None or p.seq != mine.seq:
                return False
            prints.append(p)
        found = compare(prints)
        if found is None:
            return True
        if not store.check([MISMATCH_KEY]):
            store.set(MISMATCH_KEY, json.dumps(found.to_dict()))
        self.report(found, mine)
        raise CollectiveMismatchError(f"ddpdoctor watch --verify: {found.message()}")

    def report(self, found: CollectiveMismatch, mine: CallPrint | None) -> None:
        if self.reported:
            return
        self.reported = True
        me = found.prints[0] if mine is None else mine
        record_finding(self.agent, {
            "kind": "collective_mismatch", "rank": self.c10d.get_rank(), "host": self.agent.host,
            "seq": found.seq, "group": found.group, "file": me.file, "line": me.line, "code": _code(me.file, me.line),
            "operation": found.operation(), "culprits": found.culprits(), "step": found.step(),
            "message": found.message(), "mismatch": found.to_dict()})  # fmt: skip

    def after_failure(self, call) -> CollectiveMismatchError | None:
        """The collective we let through failed (gloo refuses a size locally; a peer that raised
        resets the connection): its peers' fingerprints, looked for during a moment, may say why."""
        if call is None:
            return None
        mine, peers = call
        store = self.c10d._get_default_store()
        deadline = time.monotonic() + AFTER_FAILURE_S
        while time.monotonic() < deadline:
            try:
                if store.check(peers) and self._compare(store, mine, peers):
                    return None  # they agree: the failure is not a mismatch of ours to name
            except CollectiveMismatchError as e:
                return e
            time.sleep(0.05)
        return None


def shared_mismatch(agent) -> None:
    """At a rank's evidence dump: the mismatch another rank found (left in the store), as this rank's
    finding too, so that every node's watch has it. Never waits."""
    state = STATE.get("fingerprints")
    c10d = sys.modules.get(C10D_MODULE)
    if state is None or c10d is None or state.reported or not c10d.is_initialized():
        return
    store = c10d._get_default_store()
    if store.check([MISMATCH_KEY]):
        state.report(CollectiveMismatch.from_dict(json.loads(store.get(MISMATCH_KEY))), None)


def _caller(frame):
    """The user's frame that called the collective, and the c10d function it called (outermost)."""
    api = ""
    while frame is not None:
        path = frame.f_code.co_filename.replace("\\", "/")
        if path.endswith("/torch/distributed/distributed_c10d.py"):
            api = frame.f_code.co_name
        elif "/torch/" not in path and "/ddpdoctor/runtime/" not in path and not path.startswith("<"):
            return frame, api
        frame = frame.f_back
    return None, api


def _code(file: str, line: int) -> str:
    import linecache

    return linecache.getline(file, line).strip()


def patch(agent, module) -> None:
    """Wrap the collectives of ``torch.distributed.distributed_c10d`` (and their names in
    ``torch.distributed``, when it has them already). Once."""
    if getattr(module, "_ddpdoctor_verify", False):
        return
    module._ddpdoctor_verify = True
    state = STATE["fingerprints"] = Fingerprints(agent, module)
    dist = sys.modules.get("torch.distributed")
    for op in _SPEC:
        real = getattr(module, op, None)
        if real is None:
            continue
        wrapped = _wrap(state, op, real)
        setattr(module, op, wrapped)
        if dist is not None and getattr(dist, op, None) is real:
            setattr(dist, op, wrapped)


def _wrap(state: Fingerprints, op: str, real):
    import functools

    @functools.wraps(real)
    def checked(*args, **kwargs):
        call = None
        try:
            call = state.check(op, args, kwargs)
        except CollectiveMismatchError:
            raise
        except Exception:  # noqa: BLE001 - the check never breaks the job: run the collective unchecked
            pass
        try:
            return real(*args, **kwargs)
        except Exception as failure:
            try:
                found = state.after_failure(call)
            except Exception:  # noqa: BLE001
                found = None
            if found is not None:
                raise found from failure
            raise

    checked._ddpdoctor = True  # type: ignore[attr-defined]
    return checked
