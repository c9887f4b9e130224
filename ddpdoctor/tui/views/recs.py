"""Recommendations: value, confidence and evidence, with the snippet ready to copy (`c`)."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.syntax import Syntax
from rich.text import Text

from ddpdoctor.core.report import Recommendation
from ddpdoctor.tui.views.common import no_data
from ddpdoctor.tui.views.selectable import ListDetail

CONFIDENCE = {"high": "bold green", "medium": "yellow", "low": "red"}


def snippet_lexer(snippet: str) -> str:
    return "bash" if snippet.lstrip().startswith(("export ", "NCCL_", "TORCH_", "GLOO_")) else "python"


class RecsPane(ListDetail):
    COLUMNS = (("Recommendation", 30), ("Value", 20), ("Confidence", 10))
    EMPTY = no_data("recommendations", "They come with a report from a run with the bandwidth checks.")

    def row(self, r: Recommendation) -> list:
        return [r.title, str(r.value), Text(r.confidence, CONFIDENCE.get(r.confidence, ""))]

    def details(self, r: Recommendation) -> RenderableType:
        parts: list[RenderableType] = [
            Text.assemble(
                (f"{r.title}: ", "bold"), (str(r.value), "bold cyan"), f"  ({r.confidence} confidence)"
            )
        ]
        if r.rationale:
            parts.append(Text(r.rationale))
        for k, v in r.evidence.items():
            parts.append(Text(f"  {k}: {v}", "dim"))
        if r.snippet:
            parts.append(Text("snippet (c copies it):", "bold"))
            parts.append(Syntax(r.snippet, snippet_lexer(r.snippet), theme="ansi_dark", word_wrap=True))
        else:
            parts.append(Text("nothing to change: no snippet", "dim"))
        return Group(*parts)

    def copy_text(self) -> str | None:
        r = self.selected()
        return r.snippet if r is not None else None
