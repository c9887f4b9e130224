"""Hardware profiles: the Profile shape and the validation of a profile's YAML node tree (pure).

A profile (``profiles/*.yaml``, schema 1) says what bandwidth a known system should reach per link
class and when to complain. Validation works on the tree ``yaml.compose`` returns, so every error
carries the line it is about: ``FILE:LINE: what is wrong, what was expected``. Reading files is
:mod:`ddpdoctor.baselines`' job; this module only needs text or an already composed node.

Schema 1 (also in docs/architecture.md, "Recommendations and profiles"):

    schema: 1                      # optional
    name: dgx-h100                 # [a-z0-9][a-z0-9._-]*, unique; what --profile takes
    description: one line
    sources: [where each number comes from; "estimate" marks a practical estimate]
    priority: 0                    # optional int: wins ties when a report cannot tell profiles apart
    match:                         # every key optional; each one given must hold for detection
      backend: nccl | gloo
      gpu_model: regex             # searched in the GPU name as NVML/torch write it
      gpus_per_node: 8 | [4, 8]
      nvlink: true | false
      pcie_gen: 4 | [4, 5]         # the GPUs' PCIe generation (NVML's max link generation)
      nics: {kind: InfiniBand | RoCE | EFA | none | [a list of them], min_count: 8, rate_Gbps: 400,
             name: regex}                # at least min_count NICs of that kind, rate and name
    large_message_B: 67108864      # optional: smallest size the all_reduce reference applies to
    expected_GBps:                 # GB/s = 1e9 B/s, unidirectional, nccl-tests busbw; null: no reference
      p2p_intra_node: ...          # one send/recv pair inside a node, large messages, its share while
      p2p_inter_node: ...          # every GPU sends at once (P2P001's rounds); across two nodes
      all_reduce_busbw_intra_node: ...   # every GPU of one node
      all_reduce_busbw_inter_node: ...   # full nodes, two or more
      per_nic: ...                 # optional: what one NIC carries (informational)
    thresholds: {warn_below_pct: 75, fail_below_pct: 50}   # % of expected
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

SCHEMA_VERSION = 1
EXPECTED_CLASSES = (
    "p2p_intra_node",
    "p2p_inter_node",
    "all_reduce_busbw_intra_node",
    "all_reduce_busbw_inter_node",
)
OPTIONAL_EXPECTED = ("per_nic",)
NIC_KINDS = ("InfiniBand", "RoCE", "EFA", "none")
BACKENDS = ("nccl", "gloo")
DEFAULT_LARGE_MESSAGE_B = 64 * 2**20
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
# libyaml's parser where PyYAML has it (its nodes carry line marks too), else the pure-Python one
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class ProfileError(ValueError):
    """One or more problems in one profile source, each ``FILE:LINE: message`` (``FILE: message``
    where no line applies, e.g. an unreadable file)."""

    def __init__(self, source: str, problems: list[tuple[int | None, str]]) -> None:
        self.source = source
        self.problems = sorted(problems, key=lambda p: (p[0] or 0, p[1]))
        super().__init__(
            "\n".join(
                f"{source}:{line}: {msg}" if line else f"{source}: {msg}" for line, msg in self.problems
            )
        )


@dataclass(frozen=True)
class NicMatch:
    kind: tuple[str, ...]  # any of these; ("none",): no RDMA NIC at all
    min_count: int = 1
    rate_Gbps: float | None = None
    name: re.Pattern | None = None


@dataclass(frozen=True)
class Match:
    backend: str | None = None
    gpu_model: re.Pattern | None = None
    gpus_per_node: tuple[int, ...] | None = None
    nvlink: bool | None = None
    pcie_gen: tuple[int, ...] | None = None
    nics: NicMatch | None = None

    def criteria(self) -> list[str]:
        """The names of the criteria this match states."""
        return [
            k
            for k in ("backend", "gpu_model", "gpus_per_node", "nvlink", "pcie_gen", "nics")
            if getattr(self, k) is not None
        ]

    def weight(self, criterion: str) -> int:
        """How many constraints a criterion states: nics counts its rate and name too, so that a profile
        naming its NICs beats one that only says their kind when both fit."""
        if criterion == "nics" and self.nics is not None:
            return 1 + (self.nics.rate_Gbps is not None) + (self.nics.name is not None)
        return 1


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    sources: tuple[str, ...]
    match: Match
    expected_GBps: dict[str, float | None]
    warn_below_pct: float
    fail_below_pct: float
    priority: int = 0
    large_message_B: int = DEFAULT_LARGE_MESSAGE_B
    origin: str = ""  # the file it came from ("<string>" for text)
    line: int = 1  # the line of its name, for duplicate-name errors
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)  # the YAML as data

    def expected(self, link_class: str) -> float | None:
        return self.expected_GBps.get(link_class)

    def to_dict(self) -> dict[str, Any]:
        """The profile as its YAML says it (JSON-able), plus where it came from."""
        return {**self.raw, "origin": self.origin}


# -- reading a node tree ------------------------------------------------------------------------------------
class _Invalid(Exception):
    def __init__(self, node: Node, msg: str) -> None:
        self.line = node.start_mark.line + 1
        self.msg = msg


def _line(node: Node) -> int:
    return node.start_mark.line + 1


def _scalar(node: Node, where: str) -> Any:
    if not isinstance(node, ScalarNode):
        kind = "a mapping" if isinstance(node, MappingNode) else "a list"
        raise _Invalid(node, f"{where} is {kind}, expected a single value")
    try:
        return SafeConstructor().construct_object(node, deep=True)
    except ConstructorError as e:
        raise _Invalid(node, f"{where}: {e.problem}, expected a plain YAML value") from None
    except ValueError:  # an integer past Python's 4,300-digit limit, and the like
        raise _Invalid(node, f"{where}: a value of {len(node.value)} characters that is no usable number") from None


def _text(node: Node, where: str) -> str:
    v = _scalar(node, where)
    if not isinstance(v, str) or not v.strip():
        raise _Invalid(node, f"{where} is {v!r}, expected non-empty text")
    return v.strip()


def _name(node: Node, where: str) -> str:
    v = _text(node, where)
    if not _NAME_RE.match(v):
        raise _Invalid(node, f"{where} is {v!r}, expected lower-case letters, digits, '.', '_' or '-'")
    return v


def _texts(node: Node, where: str) -> tuple[str, ...]:
    if not isinstance(node, SequenceNode) or not node.value:
        raise _Invalid(node, f"{where} must be a non-empty list of text (where the numbers come from)")
    return tuple(_text(item, f"{where}[{i}]") for i, item in enumerate(node.value))


def _number(node: Node, where: str, nullable: bool = False, upper: float | None = None) -> float | None:
    v = _scalar(node, where)
    if v is None and nullable:
        return None
    wanted = "a positive number" + (f" up to {upper:g}" if upper else "") + (" or null" if nullable else "")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise _Invalid(node, f"{where} is {v!r}, expected {wanted}")
    if v <= 0 or (upper is not None and v > upper):
        raise _Invalid(node, f"{where} is {v!r}, expected {wanted}")
    return float(v)


def _int(node: Node, where: str, lo: int, hi: int) -> int:
    v = _scalar(node, where)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise _Invalid(node, f"{where} is {v!r}, expected a whole number from {lo} to {hi}")
    return v


def _ints(lo: int, hi: int) -> Callable[[Node, str], tuple[int, ...]]:
    def check(node: Node, where: str) -> tuple[int, ...]:
        if isinstance(node, SequenceNode):
            if not node.value:
                raise _Invalid(node, f"{where} is an empty list, expected a number or a list of numbers")
            return tuple(_int(item, f"{where}[{i}]", lo, hi) for i, item in enumerate(node.value))
        return (_int(node, where, lo, hi),)

    return check


def _bool(node: Node, where: str) -> bool:
    v = _scalar(node, where)
    if not isinstance(v, bool):
        raise _Invalid(node, f"{where} is {v!r}, expected true or false")
    return v


def _regex(node: Node, where: str) -> re.Pattern:
    v = _text(node, where)
    try:
        return re.compile(v)
    except re.error as e:
        raise _Invalid(
            node, f"{where} {v!r} is not a valid regular expression ({e}), expected a Python regex"
        )


def _kinds(node: Node, where: str) -> tuple[str, ...]:
    items = node.value if isinstance(node, SequenceNode) else [node]
    if not items:
        raise _Invalid(node, f"{where} is an empty list, expected one of {', '.join(NIC_KINDS)} or a list")
    kinds = tuple(_choice(NIC_KINDS)(item, where) for item in items)
    if "none" in kinds and len(kinds) > 1:
        raise _Invalid(node, f"{where} lists none with other kinds, expected none alone")
    return kinds


def _choice(options: tuple[str, ...]) -> Callable[[Node, str], str]:
    def check(node: Node, where: str) -> str:
        v = _scalar(node, where)
        if v not in options:
            raise _Invalid(node, f"{where} is {v!r}, expected one of {', '.join(options)}")
        return v

    return check


Field = tuple[bool, Callable[[Node, str], Any]]  # (required, validator)


def _mapping(
    node: MappingNode, where: str, fields: dict[str, Field], problems: list[tuple[int, str]]
) -> dict:
    """Validate a mapping: known keys only, no duplicates, required keys present, each value checked.
    Problems are collected; the keys whose values passed are returned."""
    out: dict[str, Any] = {}
    seen: dict[str, int] = {}
    for key_node, value_node in node.value:
        try:
            key = _scalar(key_node, f"a key in {where}")
        except _Invalid as e:
            problems.append((e.line, e.msg))
            continue
        label = f"{where}.{key}" if where else str(key)
        if key in seen:
            problems.append(
                (_line(key_node), f"{label} is given twice (first on line {seen[key]}), expected once")
            )
            continue
        seen[key] = _line(key_node)
        if key not in fields:
            problems.append((_line(key_node), f"unknown key {label!r}, expected one of {', '.join(fields)}"))
            continue
        try:
            out[key] = fields[key][1](value_node, label)
        except _Invalid as e:
            problems.append((e.line, e.msg))
    for key, (required, _) in fields.items():
        if required and key not in seen:
            label = f"{where}.{key}" if where else key
            problems.append((_line(node), f"missing {label!r}, expected it in {where or 'the profile'}"))
    return out


def _nested(fields: dict[str, Field], problems: list[tuple[int, str]]) -> Callable[[Node, str], dict]:
    def check(node: Node, where: str) -> dict:
        if not isinstance(node, MappingNode):
            raise _Invalid(node, f"{where} must be a mapping of {', '.join(fields)}")
        return _mapping(node, where, fields, problems)

    return check


def _child(node: Node, *keys: str) -> Node:
    """The value node under a path of keys (the last one given when a key repeats)."""
    for key in keys:
        node = [v for k, v in node.value if isinstance(k, ScalarNode) and k.value == key][-1]
    return node


def _as_data(node: Node) -> Any:
    """The node as plain data (for Profile.raw), regexes and all left as text."""
    return SafeConstructor().construct_document(node)


def profile_from_node(node: Node | None, source: str = "<string>") -> Profile:
    """Validate one composed YAML document as a profile; ProfileError lists every problem found."""
    problems: list[tuple[int, str]] = []
    if node is None:
        raise ProfileError(source, [(1, "empty file, expected a YAML mapping (name, description, ...)")])
    nic_fields: dict[str, Field] = {
        "kind": (True, _kinds),
        "min_count": (False, lambda n, w: _int(n, w, 1, 1024)),
        "rate_Gbps": (False, lambda n, w: _number(n, w, upper=100000)),
        "name": (False, _regex),
    }
    match_fields: dict[str, Field] = {
        "backend": (False, _choice(BACKENDS)),
        "gpu_model": (False, _regex),
        "gpus_per_node": (False, _ints(0, 1024)),
        "nvlink": (False, _bool),
        "pcie_gen": (False, _ints(1, 7)),
        "nics": (False, _nested(nic_fields, problems)),
    }
    expected_fields: dict[str, Field] = {
        k: (True, lambda n, w: _number(n, w, nullable=True)) for k in EXPECTED_CLASSES
    }
    expected_fields.update({k: (False, lambda n, w: _number(n, w, nullable=True)) for k in OPTIONAL_EXPECTED})
    pct = (True, lambda n, w: _number(n, w, upper=100))
    threshold_fields: dict[str, Field] = {"warn_below_pct": pct, "fail_below_pct": pct}
    top: dict[str, Field] = {
        "schema": (False, lambda n, w: _int(n, w, SCHEMA_VERSION, SCHEMA_VERSION)),
        "name": (True, _name),
        "description": (True, _text),
        "sources": (True, _texts),
        "priority": (False, lambda n, w: _int(n, w, -1000, 1000)),
        "match": (True, _nested(match_fields, problems)),
        "large_message_B": (False, lambda n, w: _int(n, w, 1, 2**50)),
        "expected_GBps": (True, _nested(expected_fields, problems)),
        "thresholds": (True, _nested(threshold_fields, problems)),
    }
    if not isinstance(node, MappingNode):
        raise ProfileError(source, [(_line(node), f"the profile must be a mapping of {', '.join(top)}")])
    got = _mapping(node, "", top, problems)
    thr = got.get("thresholds") or {}
    if "warn_below_pct" in thr and "fail_below_pct" in thr and thr["fail_below_pct"] >= thr["warn_below_pct"]:
        msg = (
            f"thresholds.fail_below_pct ({thr['fail_below_pct']:g}) is not below warn_below_pct "
            f"({thr['warn_below_pct']:g}), expected fail < warn"
        )
        problems.append((_line(_child(node, "thresholds", "fail_below_pct")), msg))
    nics = (got.get("match") or {}).get("nics")
    if nics and nics.get("kind") == ("none",) and ({"min_count", "rate_Gbps", "name"} & set(nics)):
        problems.append(
            (
                _line(_child(node, "match", "nics")),
                "match.nics.kind is none, expected no min_count, rate_Gbps or name with it",
            )
        )
    if problems:
        raise ProfileError(source, problems)
    m = got["match"]
    nic = m.get("nics")
    return Profile(
        name=got["name"],
        description=got["description"],
        sources=got["sources"],
        match=Match(
            backend=m.get("backend"),
            gpu_model=m.get("gpu_model"),
            gpus_per_node=m.get("gpus_per_node"),
            nvlink=m.get("nvlink"),
            pcie_gen=m.get("pcie_gen"),
            nics=NicMatch(
                kind=nic["kind"],
                min_count=nic.get("min_count", 1),
                rate_Gbps=nic.get("rate_Gbps"),
                name=nic.get("name"),
            )
            if nic
            else None,
        ),
        expected_GBps=dict(got["expected_GBps"]),
        warn_below_pct=thr["warn_below_pct"],
        fail_below_pct=thr["fail_below_pct"],
        priority=got.get("priority", 0),
        large_message_B=got.get("large_message_B", DEFAULT_LARGE_MESSAGE_B),
        origin=source,
        line=_line(_child(node, "name")),
        raw=_as_data(node),
    )


def parse_profile(text: str, source: str = "<string>") -> Profile:
    """A profile from YAML text. Syntax errors, too, come back as ProfileError with their line."""
    try:
        node = yaml.compose(text, Loader=_LOADER)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else 1
        raise ProfileError(source, [(line, f"not valid YAML: {e.problem or e.context}")]) from None
    except yaml.YAMLError as e:
        raise ProfileError(source, [(1, f"not valid YAML: {e}")]) from None
    return profile_from_node(node, source)


def duplicate_names(profiles: list[Profile]) -> list[ProfileError]:
    """One error for every profile whose name an earlier one already has (a name must pick one profile)."""
    first: dict[str, Profile] = {}
    out = []
    for p in profiles:
        if p.name in first:
            f = first[p.name]
            msg = f"profile name {p.name!r} is already used by {f.origin}:{f.line}, expected a unique name"
            out.append(ProfileError(p.origin, [(p.line, msg)]))
        else:
            first[p.name] = p
    return out


def check_unique(profiles: list[Profile]) -> None:
    dups = duplicate_names(profiles)
    if dups:
        raise dups[0]
