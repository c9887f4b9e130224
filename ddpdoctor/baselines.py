"""Hardware profiles: load the shipped ones (``profiles/*.yaml``, installed as ``ddpdoctor.profiles``)
or a user's file, pick the one that fits a report, and judge the report's bandwidth against it.

The pure halves live in ddpdoctor/model/: ``profile_schema`` (the shape and its validation, errors as
``FILE:LINE: what is wrong, what was expected``), ``profile_detect`` (facts and matching) and
``profile_judge`` (findings with "% of expected"). This module adds only the reading of files.

Integration (rank 0, when the report is built)::

    from ddpdoctor.baselines import apply_profile, resolve_profile
    profile, how, detection = resolve_profile(report, options.get("profile"))  # None: detect
    if profile is not None:
        apply_profile(report, profile, how, detection)
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import resources
from pathlib import Path

from ddpdoctor.core.report import Report
from ddpdoctor.model.profiles.detect import MatchResult, as_report, best_match, rank_profiles, report_facts
from ddpdoctor.model.profiles.judge import apply_profile, forget_profile, judge
from ddpdoctor.model.profiles.schema import Profile, ProfileError, check_unique, parse_profile

__all__ = [
    "Profile",
    "ProfileError",
    "apply_profile",
    "forget_profile",
    "detect_profile",
    "detection",
    "judge",
    "list_profiles",
    "load_file",
    "load_profile",
    "profile_files",
    "resolve_profile",
    "shipped_files",
]

SUFFIXES = (".yaml", ".yml")


def shipped_files() -> list[Path]:
    """The profiles that ship with ddpdoctor, sorted by file name."""
    root = resources.files("ddpdoctor.profiles")
    return sorted((Path(str(p)) for p in root.iterdir() if p.name.endswith(SUFFIXES)), key=lambda p: p.name)


def load_file(path: str | Path) -> Profile:
    """One profile file, validated. ProfileError names the file (and the line) of every problem."""
    from ddpdoctor.boundary.inputs import InputError, read_text

    try:  # the input boundary: regular files only (a FIFO never blocks), bounded, UTF-8
        text = read_text(path, "profile YAML file", 16 << 20)
    except InputError as e:
        raise ProfileError(str(path), [(e.line, f"{e.problem}; {e.todo}")]) from None
    return parse_profile(text, str(path))


def profile_files(path: Path) -> list[Path]:
    """A file as itself, a folder as the *.yaml / *.yml files in it."""
    return sorted(q for q in path.iterdir() if q.suffix in SUFFIXES) if path.is_dir() else [path]


def list_profiles(extra: Iterable[str | Path] = ()) -> list[Profile]:
    """The shipped profiles, then those in ``extra`` (files, or folders of *.yaml); names must be unique."""
    files = shipped_files() + [f for e in extra for f in profile_files(Path(e))]
    profiles = [load_file(f) for f in files]
    check_unique(profiles)
    return profiles


def _looks_like_path(name_or_path: str) -> bool:
    return "/" in name_or_path or name_or_path.endswith(SUFFIXES) or Path(name_or_path).is_file()


def load_profile(name_or_path: str | Path) -> Profile:
    """A shipped profile by name (``dgx-h100``), or any profile file by path."""
    text = str(name_or_path)
    if isinstance(name_or_path, Path) or _looks_like_path(text):
        return load_file(text)
    profiles = list_profiles()
    found = next((p for p in profiles if p.name == text), None)
    if found is None:
        known = ", ".join(p.name for p in profiles)
        raise ProfileError(
            text, [(None, f"unknown profile, expected one of {known} or a path to a YAML file")]
        )
    return found


def detection(report: Report | dict, profiles: list[Profile] | None = None) -> list[MatchResult]:
    """How every profile matches what the report knows, the qualifying ones first, best first."""
    return rank_profiles(list_profiles() if profiles is None else profiles, report_facts(report))


def detect_profile(report: Report | dict, profiles: list[Profile] | None = None) -> Profile | None:
    """The profile that fits the report best, or None when none fits (or the report says too little)."""
    found = best_match(list_profiles() if profiles is None else profiles, report_facts(report))
    return found.profile if found else None


def resolve_profile(
    report: Report | dict, wanted: str | Path | None = None
) -> tuple[Profile | None, str, MatchResult | None]:
    """(profile, how, detection): the one the user named ("chosen"; a bad name or file raises
    ProfileError), else the detected one ("detected"), else (None, "none", None)."""
    if wanted:
        return load_profile(wanted), "chosen", None
    found = best_match(list_profiles(), report_facts(as_report(report)))
    return (found.profile, "detected", found) if found else (None, "none", None)
