"""The report's JSON Schema (draft 2020-12), generated from the report types in ddpdoctor.core.report.

    python -m ddpdoctor.report.schema > ddpdoctor/report/report.schema.json

The shipped file (``ddpdoctor/report/report.schema.json``, in the wheel) is this function's output; a test
regenerates it and validates a real report against it. A check's ``data`` is an open object here: each
check documents its own payload (docs/architecture.md).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import sys
import types
import typing
from typing import Any

from ddpdoctor.core.report import SCHEMA_VERSION, CheckResult, Finding, Location, Recommendation

SCHEMA_FILE = "report.schema.json"
# Fields to_dict leaves out when they are None (Finding.to_dict): optional in the schema.
_OMITTED_WHEN_NONE = {Finding: {"hint", "location"}}


def _type(tp: Any) -> dict[str, Any]:
    origin = typing.get_origin(tp)
    if tp is Any:
        return {}
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [_type(a) for a in typing.get_args(tp)]}
    if tp is type(None):
        return {"type": "null"}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return {"enum": [m.value for m in tp]}
    if dataclasses.is_dataclass(tp):
        return {"$ref": f"#/$defs/{tp.__name__}"}
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        return {"type": "integer"}
    if tp is float:
        return {"type": "number"}
    if tp is str:
        return {"type": "string"}
    if origin is list:
        (item,) = typing.get_args(tp) or (Any,)
        return {"type": "array", "items": _type(item)}
    if origin is dict or tp is dict:
        return {"type": "object"}
    raise TypeError(f"no JSON Schema for {tp!r}")


def _object(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    props, required = {}, []
    for f in dataclasses.fields(cls):
        props[f.name] = _type(hints[f.name])
        if f.name not in _OMITTED_WHEN_NONE.get(cls, ()):
            required.append(f.name)
    return {"type": "object", "properties": props, "required": required}


def report_schema() -> dict[str, Any]:
    """The schema of Report.to_dict() for this SCHEMA_VERSION."""
    defs = {cls.__name__: _object(cls) for cls in (Location, Finding, CheckResult, Recommendation)}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"ddpdoctor report, schema_version {SCHEMA_VERSION}",
        "description": "Written by `ddpdoctor check --json` (and `import`); generated from "
                       "ddpdoctor.core.report by ddpdoctor/report/schema.py. A check's `data` is documented by "
                       "the check (docs/architecture.md).",
        "type": "object",
        "properties": {
            "schema_version": {"const": SCHEMA_VERSION},
            "tool": {"type": "object", "properties": {"name": {"const": "ddpdoctor"}, "version": {"type": "string"}},
                     "required": ["name", "version"]},
            "created": {"type": "number", "description": "unix time"},
            "run": {"type": "object", "description": "backend, world_size, nodes, endpoint, complete, options, ..."},
            "ranks": {"type": "array", "items": {"type": "object"}},
            "versions": {"type": "object"},
            "checks": {"type": "array", "items": {"$ref": "#/$defs/CheckResult"}},
            "recommendations": {"type": "array", "items": {"$ref": "#/$defs/Recommendation"}},
            "lint": {"type": "array", "items": {"$ref": "#/$defs/Finding"}},
        },
        "required": ["schema_version", "tool", "created", "run", "ranks", "versions", "checks",
                     "recommendations", "lint"],
        "$defs": defs,
    }


def main() -> int:
    sys.stdout.write(json.dumps(report_schema(), indent=1, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
