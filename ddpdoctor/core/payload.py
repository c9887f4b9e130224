"""Reading check payloads back from JSON, and the plot curve several payloads share.

A check's ``data`` stays plain JSON in the report (report.schema.json); each payload that another module
reads has a frozen dataclass in its domain whose ``to_json()`` writes exactly that JSON and whose
``from_json()`` reads it back. A payload may come from a report written by an older ddpdoctor, from
``ddpdoctor import`` or from a test that sets only a few keys, so these readers give the field's
default when a key is missing or holds another JSON type; they never raise. Sequences become tuples
(the dataclasses are frozen) and go back to lists in ``to_json()``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def number(d: Mapping, key: str, default: Any = None) -> Any:
    """An int or float (never a bool), else ``default``."""
    v = d.get(key)
    return v if is_number(v) else default


def whole(d: Mapping, key: str, default: Any = None) -> Any:
    v = d.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else default


def text(d: Mapping, key: str, default: Any = None) -> Any:
    v = d.get(key)
    return v if isinstance(v, str) else default


def flag(d: Mapping, key: str, default: Any = None) -> Any:
    v = d.get(key)
    return v if isinstance(v, bool) else default


def obj(d: Mapping, key: str) -> dict | None:
    """A JSON object (kept as it is), else None."""
    v = d.get(key)
    return v if isinstance(v, dict) else None


def items(d: Mapping, key: str) -> tuple:
    """A JSON list as a tuple (its items as they are), else ()."""
    v = d.get(key)
    return tuple(v) if isinstance(v, list) else ()


def objects(d: Mapping, key: str) -> tuple[dict, ...]:
    """The objects of a JSON list (anything else in it left out)."""
    return tuple(x for x in items(d, key) if isinstance(x, dict))


def frozen(v: Any) -> Any:
    """Lists as tuples, at any depth (objects stay dicts)."""
    if isinstance(v, (list, tuple)):
        return tuple(frozen(x) for x in v)
    if isinstance(v, dict):
        return {k: frozen(x) for k, x in v.items()}
    return v


def thawed(v: Any) -> Any:
    """The JSON form of ``frozen``'s result: tuples back to lists."""
    if isinstance(v, (list, tuple)):
        return [thawed(x) for x in v]
    if isinstance(v, dict):
        return {k: thawed(x) for k, x in v.items()}
    return v


def as_dict(v: Any) -> dict:
    return v if isinstance(v, dict) else {}


@dataclass(frozen=True)
class PlotCurve:
    """``{"unit_x": "B", "unit_y": "GB/s", "points": [[x, y], ...]}``: a curve for plots."""

    points: tuple[tuple[float, float], ...]
    unit_x: str = "B"
    unit_y: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"unit_x": self.unit_x, "unit_y": self.unit_y, "points": [list(p) for p in self.points]}

    @classmethod
    def from_json(cls, d: Any, unit_y: str = "") -> PlotCurve | None:
        """None when ``d`` is not a curve; points that do not start with two numbers are left out.
        ``unit_y``: the unit when the curve does not say (a map of curves may say it once for all)."""
        if not isinstance(d, dict) or not isinstance(d.get("points"), list):
            return None
        pts = tuple(
            (p[0], p[1])
            for p in d["points"]
            if isinstance(p, (list, tuple)) and len(p) >= 2 and is_number(p[0]) and is_number(p[1])
        )
        return cls(pts, text(d, "unit_x", "B"), text(d, "unit_y", unit_y))


@dataclass(frozen=True)
class LabeledMatrix:
    """``{"unit": "GB/s", "labels": [...], "values": [[...], ...]}``: row = sender; a cell may be a
    number, a word (``nvidia-smi topo -m``'s NV18, SYS) or null (not measured)."""

    labels: tuple[Any, ...]
    values: tuple[tuple[Any, ...], ...]
    unit: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"unit": self.unit, "labels": list(self.labels), "values": [list(r) for r in self.values]}

    @classmethod
    def from_json(cls, d: Any) -> LabeledMatrix | None:
        """None when ``d`` has no list of rows; ragged rows and odd labels are kept as they are (a viewer
        pads them)."""
        if not isinstance(d, dict) or not isinstance(d.get("values"), list):
            return None
        if not all(isinstance(r, list) for r in d["values"]):
            return None
        return cls(items(d, "labels"), tuple(tuple(r) for r in d["values"]), text(d, "unit", ""))
