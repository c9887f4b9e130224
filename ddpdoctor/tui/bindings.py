"""Key bindings as data: the app, the footer and the help screen all read this one table."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Key:
    key: str  # textual key name(s), comma-separated
    action: str  # textual action string
    description: str  # footer label (short: the footer must fit 80 columns)
    help: str  # the help screen's longer line
    scope: str = "everywhere"
    show: bool = True  # in the footer
    display: str | None = None  # how the key is drawn when its name is not what users type


VIEWS = (  # (tab id, footer label, title)
    ("overview", "Checks", "Checks: live status per node and rank"),
    ("p2p", "P2P", "Point-to-point bandwidth heatmap"),
    ("bw", "Curve", "All-reduce busbw against message size"),
    ("topo", "Topo", "Topology: NVLink, NICs and rails, GPUDirect RDMA"),
    ("recs", "Recs", "Recommendations with copy-ready snippets"),
    ("lint", "Lint", "Lint findings with source context"),
)

APP_KEYS: tuple[Key, ...] = (
    *(
        Key(str(i), f"show_view('{tab}')", label, f"show the {title[0].lower() + title[1:]}", show=True)
        for i, (tab, label, title) in enumerate(VIEWS, start=1)
    ),
    Key("question_mark", "help", "Help", "this help screen", display="?"),
    Key("c", "copy", "Copy", "copy the selected snippet / finding to the clipboard", scope="Recs, Lint"),
    Key("n", "next_node", "Node", "show the next node's topology", scope="Topo", show=False),
    Key("x", "stop", "Stop", "stop the running check (live mode)", show=False),
    Key("q", "quit", "Quit", "quit (a running check is stopped first)"),
)

WIDGET_KEYS: tuple[Key, ...] = (
    Key(
        "up,down,left,right",
        "",
        "",
        "move the selected cell; its details show below",
        scope="P2P",
        show=False,
        display="←↑↓→",
    ),
    Key(
        "up,down",
        "",
        "",
        "select a check, recommendation or finding",
        scope="tables",
        show=False,
        display="↑↓",
    ),
    Key("tab", "", "", "move focus between panes", show=False),
)


def textual_bindings() -> list:
    from textual.binding import Binding

    return [Binding(k.key, k.action, k.description, show=k.show, key_display=k.display) for k in APP_KEYS]


def help_rows() -> list[tuple[str, str, str]]:
    """(keys as typed, what it does, where) for the help screen."""
    return [(k.display or k.key, k.help, k.scope) for k in (*APP_KEYS, *WIDGET_KEYS)]
