"""``Report.run``: what ran where and how it ended, as one typed record.

Producers (the runtime, ``import``, ``topo``, ``health``, the fleet's drain and history) fill it in steps
by setting attributes; consumers read attributes. Its JSON form is the report's ``run`` object exactly as
ddpdoctor has always written it: only the keys a producer set, in the order it set them (setting a key
again keeps its place, ``unset`` then setting moves it to the end, as a dict would), so a report read
and written again is unchanged. Keys this record does not model, or that hold another JSON type than
the field's (an older or hand-made report), are kept verbatim in ``extra`` and written back in place.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from ddpdoctor.core.payload import is_number


@dataclass(frozen=True)
class BadNodes:
    """The nodes the verdict blames (``check --bad-nodes``): the names, and one Slurm hostlist expression."""

    nodes: tuple[str, ...] = ()
    hostlist: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"nodes": list(self.nodes), "hostlist": self.hostlist}

    @classmethod
    def from_json(cls, d: Any) -> BadNodes | None:
        """None unless ``d`` is exactly what ``to_json`` writes (anything else stays verbatim in ``extra``)."""
        if not isinstance(d, dict) or not isinstance(d.get("nodes"), list) or not isinstance(d.get("hostlist"), str):
            return None
        bad = cls(tuple(d["nodes"]), d["hostlist"])
        return bad if bad.to_json() == d and all(isinstance(n, str) for n in bad.nodes) else None


_FROM_FIELD = True  # a key's value lives in its field
_FROM_EXTRA = False  # ... or verbatim in ``extra``


@dataclass(init=False)
class RunInfo:
    """The report's ``run`` object. ``None`` or empty means not known (and not written unless set)."""

    mode: str | None = None  # "import" (measured by other tools), "lint"
    command: str | None = None  # "health"
    source: str | None = None  # "topology snapshots" (topo --from)
    backend: str | None = None  # "nccl", "gloo"
    world_size: int | None = None
    nodes: list[str] = field(default_factory=list)  # host names in node-rank order
    nnodes: int | None = None
    imported: list[dict[str, Any]] = field(default_factory=list)  # import: [{"file", "tools"}]
    endpoint: str | None = None  # the rendezvous endpoint
    rdzv_id: str | None = None
    options: dict[str, Any] = field(default_factory=dict)  # --option values
    complete: bool | None = None  # False: the run ended early (aborted_reason says why)
    aborted_reason: str | None = None
    partial_from: str | None = None  # "events": rebuilt from the event stream after a crash
    lost_ranks: list[int] = field(default_factory=list)
    lost_nodes: list[str] = field(default_factory=list)
    duration_s: float | None = None
    launch_t0: float | None = None  # wall clock when the launch began
    topology: dict[str, Any] = field(default_factory=dict)  # health: host -> topology snapshot
    profile: dict[str, Any] | None = None  # the hardware profile record (baselines.apply_profile)
    facts: dict[str, Any] | None = None  # import: host -> facts read from the files
    warnings: list[str] = field(default_factory=list)  # what went wrong without costing the report
    bad_nodes: BadNodes | None = None  # --bad-nodes
    drain: list[dict[str, Any]] = field(default_factory=list)  # --drain: one record per node confirmed
    drain_reason: str | None = None  # health: why this node should be drained
    drained: bool | None = None  # health --drain: scontrol succeeded
    history: dict[str, Any] | None = None  # --history: node set, versions, valid_until, ...
    extra: dict[str, Any] = field(default_factory=dict)  # keys not modelled above, kept verbatim

    def __init__(self, **values: Any) -> None:
        object.__setattr__(self, "_keys", {})  # JSON key -> _FROM_FIELD / _FROM_EXTRA, in set order
        for f in fields(self):
            object.__setattr__(self, f.name, f.default_factory() if f.default is MISSING else f.default)  # type: ignore[misc]
        for name, value in values.items():  # keyword order is the JSON key order
            if name not in _FIELDS and name != "extra":
                raise TypeError(f"RunInfo has no field {name!r}")
            setattr(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in _FIELDS and name != "extra":  # a misspelt field would be lost from the report
            raise AttributeError(f"RunInfo has no field {name!r}")
        object.__setattr__(self, name, value)
        if name == "extra":
            for k in value:
                self._keys.setdefault(k, _FROM_EXTRA)
        elif name in _FIELDS:
            self._keys[name] = _FROM_FIELD  # an existing key keeps its place, as in a dict
            self.extra.pop(name, None)

    def unset(self, name: str) -> None:
        """Forget a field (its default again, not written); set again, it goes last."""
        f = _FIELDS[name]
        object.__setattr__(self, name, f.default_factory() if f.default is MISSING else f.default)  # type: ignore[misc]
        self._keys.pop(name, None)
        self.extra.pop(name, None)

    def is_set(self, name: str) -> bool:
        return self._keys.get(name) is _FROM_FIELD

    def add_warning(self, text: str) -> None:
        self.warnings = [*self.warnings, text]

    @property
    def counted_nodes(self) -> int | None:
        """The node count older reports give in place of the names (``"nodes": 2``), else None."""
        v = self.extra.get("nodes")
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    @property
    def node_count(self) -> int:
        """How many nodes: the names listed, or the count an older report gives."""
        counted = self.counted_nodes
        return counted if counted is not None else len(self.nodes)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, src in self._keys.items():
            if src is _FROM_FIELD:
                v = getattr(self, k)
                out[k] = v.to_json() if isinstance(v, BadNodes) else v
            elif k in self.extra:
                out[k] = self.extra[k]
        for k, v in self.extra.items():
            out.setdefault(k, v)
        return out

    @classmethod
    def from_json(cls, d: Any) -> RunInfo:
        """Leniently: a key with another JSON type than its field's stays in ``extra``; never raises."""
        info = cls()
        if not isinstance(d, dict):
            return info
        for k, v in d.items():
            if k == "bad_nodes" and v is not None:
                v = BadNodes.from_json(v) or _Unfit(v)
            if k in _FIELDS and not isinstance(v, _Unfit) and _fits(_KINDS[k], v):
                setattr(info, k, v)
            else:
                info.extra[k] = v.value if isinstance(v, _Unfit) else v
                info._keys.setdefault(k, _FROM_EXTRA)
        return info


@dataclass(frozen=True)
class _Unfit:
    value: Any  # a nested record that does not read as its dataclass: kept verbatim


def _fits(kind: tuple[type, ...], v: Any) -> bool:
    if v is None:
        return type(None) in kind
    if isinstance(v, bool):
        return bool in kind
    if float in kind and is_number(v):
        return True
    return isinstance(v, tuple(k for k in kind if k is not bool))


_FIELDS = {f.name: f for f in fields(RunInfo) if f.name != "extra"}
# The JSON types each field takes (None only where the field's default is None).
_KINDS: dict[str, tuple[type, ...]] = {
    "mode": (str, type(None)), "command": (str, type(None)), "source": (str, type(None)),
    "backend": (str, type(None)), "world_size": (int, type(None)), "nodes": (list,),
    "nnodes": (int, type(None)), "imported": (list,), "endpoint": (str, type(None)),
    "rdzv_id": (str, type(None)), "options": (dict,), "complete": (bool, type(None)),
    "aborted_reason": (str, type(None)), "partial_from": (str, type(None)), "lost_ranks": (list,),
    "lost_nodes": (list,), "duration_s": (float, type(None)), "launch_t0": (float, type(None)),
    "topology": (dict,), "profile": (dict, type(None)), "facts": (dict, type(None)),
    "warnings": (list,), "bad_nodes": (BadNodes, type(None)), "drain": (list,),
    "drain_reason": (str, type(None)), "drained": (bool, type(None)), "history": (dict, type(None)),
}
assert set(_KINDS) == set(_FIELDS), "every RunInfo field says its JSON types"
