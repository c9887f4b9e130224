"""The reason ddpdoctor gives Slurm when it drains a node (pure): one stable, parseable shape.

    ddpdoctor: CODE summary

CODE is the code of the check that failed (GPU001, NVL001, PCI001, NUMA001, IB001, GDR001, NCCL001,
ENV001, COL001, P2P001, ...); summary is the first error finding of that check, on one line. Other
tools (NVIDIA NVSentinel turns drain reasons into events by regex) match ``REASON_RE``. The text is
plain ASCII-safe printable characters without double quotes, at most ``MAX_REASON`` characters, so it
survives ``scontrol update ... Reason="..."``, ``sinfo -R`` and a shell.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PREFIX = "ddpdoctor:"
MAX_REASON = 160
REASON_RE = re.compile(r"^ddpdoctor: (?P<code>[A-Z][A-Z0-9]*[0-9]{3}) (?P<summary>\S.*)$")
_CODE_RE = re.compile(r"^[A-Z][A-Z0-9]*[0-9]{3}$")


@dataclass(frozen=True)
class DrainReason:
    code: str
    summary: str

    def text(self) -> str:
        return format_reason(self.code, self.summary)


def _clean(summary: str) -> str:
    # One line of printable text: control characters and quotes would break scontrol's quoting and
    # line-oriented parsers of `sinfo -R`.
    s = "".join(ch if ch.isprintable() else " " for ch in summary).replace('"', "'")
    return " ".join(s.split())


def format_reason(code: str, summary: str) -> str:
    if not _CODE_RE.match(code):
        raise ValueError(f"not a check code: {code!r}")
    head = f"{PREFIX} {code} "
    body = _clean(summary) or "failed"
    room = MAX_REASON - len(head)
    if len(body) > room:
        body = body[: room - 3].rstrip() + "..."
    return head + body


def parse_reason(text: str) -> DrainReason | None:
    """A reason ddpdoctor wrote, or None for anyone else's (Slurm's own, an admin's)."""
    m = REASON_RE.match(text.strip())
    return DrainReason(m.group("code"), m.group("summary")) if m else None
