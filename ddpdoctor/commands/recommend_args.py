"""The options that steer recommendations and profile judging, shared by `check` and `recommend`.

Parsing only: the values are checked here (a bad profile name, a malformed count) so a run that would
fail late fails before anything is launched, with exit 2.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


class OptionError(ValueError):
    """A recommendation option that cannot be used; the message names the flag."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("hardware profile and recommendations")
    g.add_argument("--profile", default=None, metavar="NAME|FILE",
                   help="judge bandwidth against this hardware profile (default: detected; "
                   "see `ddpdoctor profiles list`)")
    g.add_argument("--layout", default=None, metavar="pp=..,dp=..,tp=..",
                   help="a process-group layout to validate and cost: NAME=SIZE items (pp, dp, tp), outermost "
                   "first, innermost last, as init_device_mesh's mesh_shape (dp=4,tp=8: TP groups of 8 "
                   "consecutive ranks)")


def profile_option(args: argparse.Namespace) -> str | None:
    """The --profile value, validated; a file path comes back absolute (workers may start elsewhere)."""
    wanted = getattr(args, "profile", None)
    if not wanted:
        return None
    from ddpdoctor.baselines import ProfileError, load_profile

    try:
        load_profile(wanted)
    except ProfileError as e:
        raise OptionError(f"--profile: {e}") from None
    path = Path(wanted)
    return str(path.resolve()) if path.exists() else wanted


def recommend_options(args: argparse.Namespace) -> dict[str, Any]:
    """What the recommendation builders read (docs/architecture.md, "Recommendations and profiles")."""
    out: dict[str, Any] = {}
    layout = getattr(args, "layout", None)
    if layout:
        from ddpdoctor.model.meshes import LayoutError, parse_layout

        try:
            parse_layout(layout)  # the world size is checked against the run's, in the recommendation
        except LayoutError as e:
            raise OptionError(f"--layout: {e}") from None
        out["layout"] = layout
    return out
