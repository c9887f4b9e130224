"""The options that steer recommendations and profile judging, shared by `check` and `recommend`.

Parsing only: the values are checked here (a bad profile name, a malformed count) so a run that would
fail late fails before anything is launched, with exit 2.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ddpdoctor.commands import flags


class OptionError(ValueError):
    """A recommendation option that cannot be used; the message names the flag."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("hardware profile and recommendations")
    g.add_argument(
        "--profile",
        default=None,
        metavar="NAME|FILE",
        help="judge bandwidth against this hardware profile (default: detected; none: no judging; "
        "see `ddpdoctor profiles list`)",
    )
    g.add_argument(
        "--model-params",
        default=None,
        metavar="COUNT",
        help="the model's trainable parameters for the bucket_cap_mb simulation, e.g. 124M, 1.3B",
    )
    g.add_argument(
        "--model-dtype", default="fp32", metavar="DTYPE", help="gradient dtype: fp32 (default), bf16, fp16"
    )
    g.add_argument(
        "--model-spec",
        default=None,
        metavar="FILE.json",
        help="exact gradient tensors instead of a count: ModelSpec JSON, e.g. from "
        "ddpdoctor.recommend.model_spec.ModelSpec.from_module(model).to_dict()",
    )
    g.add_argument(
        "--backward-ms",
        type=flags.scale,
        default=None,
        metavar="MS",
        help="the model's backward time per step on one GPU (default: unknown, several assumed)",
    )
    g.add_argument(
        "--find-unused-parameters", action="store_true", help="the job sets find_unused_parameters=True"
    )
    g.add_argument("--static-graph", action="store_true", help="the job sets static_graph=True")
    g.add_argument(
        "--layout",
        default=None,
        metavar="pp=..,dp=..,tp=..",
        help="a process-group layout to validate and cost: NAME=SIZE items (pp, dp, tp), outermost "
        "first, innermost last, as init_device_mesh's mesh_shape (dp=4,tp=8: TP groups of 8 "
        "consecutive ranks)",
    )


def profile_option(args: argparse.Namespace) -> str | None:
    """The --profile value, validated; a file path comes back absolute (workers may start elsewhere)."""
    wanted = getattr(args, "profile", None)
    if not wanted:
        return None
    if wanted == "none":
        return wanted
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
    model = _model_spec(args)
    if model is not None:
        out["model"] = model
    layout = getattr(args, "layout", None)
    if layout:
        from ddpdoctor.model.placement.meshes import LayoutError, parse_layout

        try:
            parse_layout(layout)  # the world size is checked against the run's, in the recommendation
        except LayoutError as e:
            raise OptionError(f"--layout: {e}") from None
        out["layout"] = layout
    return out


def _model_spec(args: argparse.Namespace) -> dict[str, Any] | None:
    """ModelSpec JSON from --model-spec or --model-params (with dtype, backward time and DDP flags)."""
    count, spec_file = getattr(args, "model_params", None), getattr(args, "model_spec", None)
    if count is None and spec_file is None:
        given = [flag for flag, v in (("--backward-ms", getattr(args, "backward_ms", None) is not None),
                                      ("--find-unused-parameters", getattr(args, "find_unused_parameters", False)),
                                      ("--static-graph", getattr(args, "static_graph", False))) if v]
        if given:  # said about a model that was not given: silently ignoring it would mislead
            raise OptionError(f"{given[0]} describes the model: give --model-params COUNT or --model-spec FILE too")
        return None
    if count is not None and spec_file is not None:
        raise OptionError("--model-params and --model-spec: give one of them")
    import dataclasses

    from ddpdoctor.recommend.model_spec import ModelSpec

    flags = {
        "find_unused_parameters": bool(getattr(args, "find_unused_parameters", False)),
        "static_graph": bool(getattr(args, "static_graph", False)),
    }
    try:
        if spec_file is not None:
            from ddpdoctor.report.io import JsonFileError, read_json

            try:
                d = read_json(spec_file, "model spec")
            except JsonFileError as e:
                raise OptionError(f"--model-spec {e}") from None
            # The flags given on the command line win over the file's (replace() re-validates).
            overrides = {k: v for k, v in flags.items() if v}
            if args.backward_ms is not None:
                overrides["backward_ms"] = args.backward_ms
            spec = dataclasses.replace(ModelSpec.from_dict(d), **overrides)
        else:
            spec = ModelSpec.from_params(count, args.model_dtype, backward_ms=args.backward_ms, **flags)
    except OptionError:
        raise
    except ValueError as e:
        raise OptionError(f"model: {e}") from None
    return spec.to_dict()
