"""Read hang evidence from folders or files: ``rank-<R>.json`` and ``watch.json`` (``ddpdoctor watch``),
and torch's own Flight Recorder dumps (``<TORCH_FR_DUMP_TEMP_FILE prefix><rank>``, default prefix
``nccl_trace_rank_``) in JSON form. torch writes those dumps pickled by default: they are read only
with ``allow_pickle=True``, and even then through an unpickler that refuses every class, so a
crafted file cannot run code. NCCL RAS's JSON report (``ncclras -f json > ncclras.json``; any
``ncclras-*.json``, ``ras.json``, ``ras-*.json``) is read beside them. Every problem raises EvidenceError naming the file."""

from __future__ import annotations

import gc
import io
import pickle
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ddpdoctor.model.hang.evidence import (
    EVIDENCE_FORMAT,
    WATCH_FORMAT,
    Evidence,
    EvidenceError,
    RankEvidence,
    WatchInfo,
    combine,
    rank_from_dict,
    torch_dump_from_dict,
    watch_from_dict,
)
from ddpdoctor.model.hang.ras import RasError, RasReport, ras_from_dict

RANK_FILE = re.compile(r"^rank-(\d+)\.json$")
WATCH_FILE = "watch.json"
RAS_FILE = re.compile(r"^(nccl)?ras([-_.][^/]*)?\.json$", re.IGNORECASE)  # how README says to save `ncclras -f json`
# torch names its dumps <prefix><rank>; we also accept a .json suffix for dumps saved as JSON
TORCH_DUMP = re.compile(r"^(.*?)(\d+)(\.json)?$")
MAX_BYTES = 512 * 1024 * 1024  # an evidence file larger than this is not ours


class _NoClassesUnpickler(pickle.Unpickler):
    """Flight Recorder dumps hold only dicts, lists, strings and numbers: refuse anything else."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")


def _read_bytes(path: Path) -> bytes:
    from ddpdoctor.boundary.inputs import InputError, read_bytes

    try:  # the input boundary: regular files only (a FIFO never blocks), bounded
        return read_bytes(path, "evidence file", MAX_BYTES)
    except InputError as e:
        raise EvidenceError(str(path), f"{e.problem}; {e.todo}") from None


def _load(path: Path, allow_pickle: bool) -> Any:
    data = _read_bytes(path)
    if not data.strip():
        raise EvidenceError(str(path), "empty file (the rank was killed while writing it?)")
    if data[:1] == b"\x80":  # pickle protocol 2+ header
        if not allow_pickle:
            raise EvidenceError(
                str(path),
                "a pickled Flight Recorder dump; ddpdoctor never unpickles by default. "
                "If you wrote this file yourself, rerun with --allow-pickle",
            )
        try:
            return _NoClassesUnpickler(io.BytesIO(data)).load()
        except Exception as e:  # noqa: BLE001 - any unpickling problem is a bad file
            raise EvidenceError(str(path), f"not a readable Flight Recorder pickle ({e})") from None
    from ddpdoctor.boundary.inputs import InputError, parse_json

    try:
        return parse_json(data.decode("utf-8"), path, "Flight Recorder dump or ddpdoctor evidence")
    except UnicodeDecodeError:
        raise EvidenceError(str(path), "neither JSON nor a Flight Recorder pickle") from None
    except InputError as e:
        where = f"line {e.line}: " if e.line else ""
        raise EvidenceError(str(path), f"{where}{e.problem} (truncated?)") from None


def _classify(paths: list[Path]) -> tuple[list[Path], list[Path], list[tuple[Path, int]]]:
    """(rank files, watch files, torch dumps with their rank) among ``paths``. In a folder that
    ``ddpdoctor watch`` wrote, other files (logs, temp files) are not evidence and are skipped."""
    ranks = [p for p in paths if RANK_FILE.match(p.name)]
    watches = [p for p in paths if p.name == WATCH_FILE]
    if ranks or watches:
        return ranks, watches, []
    dumps = []
    prefixes: dict[str, Path] = {}
    for p in paths:
        if (m := TORCH_DUMP.match(p.name)) and not p.name.endswith(".tmp"):
            prefixes.setdefault(m.group(1), p)
            dumps.append((p, int(m.group(2))))
    if len(prefixes) > 1:
        a, b = list(prefixes.values())[:2]
        raise EvidenceError(
            str(b), f"its name prefix differs from {a.name}: give only one job's Flight Recorder dumps"
        )
    return ranks, watches, dumps


def _files_of(arg: Path) -> list[Path]:
    if arg.is_dir():
        return sorted(p for p in arg.iterdir() if p.is_file() and not p.name.startswith("."))
    if arg.is_file() or (arg.exists() and not arg.is_dir()):
        return [arg]  # a FIFO or a device is refused by the read, with its kind named
    raise EvidenceError(str(arg), "no such file or folder")


def _with_node_folders(paths: list[Path]) -> list[Path]:
    """A folder holding only sub-folders (one per node, as copied from a cluster) stands for them."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir() and not any(q.is_file() and not q.name.startswith(".") for q in p.iterdir()):
            subs = sorted(q for q in p.iterdir() if q.is_dir() and not q.name.startswith("."))
            out += subs or [p]
        else:
            out.append(p)
    return out


@contextmanager
def collector_paused():
    """Evidence is millions of small acyclic objects (2000 FR entries per rank): with the cyclic
    collector on, it re-walks the growing heap again and again (half the read time on 64 ranks,
    seen here). Reference counting frees all of it; the collector is back on afterwards."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def read_evidence(paths: list[Path], allow_pickle: bool = False) -> Evidence:
    """All evidence under ``paths`` (folders or single files), checked and combined into one job."""
    with collector_paused():
        return _read(paths, allow_pickle)


def _read(paths: list[Path], allow_pickle: bool) -> Evidence:
    if not paths:
        raise EvidenceError(".", "no evidence folder given")
    rank_evs: list[RankEvidence] = []
    watch: WatchInfo | None = None
    ras: RasReport | None = None
    sources: list[str] = []
    for arg in _with_node_folders([Path(a) for a in paths]):
        files = _files_of(Path(arg))
        ras_files = [p for p in files if RAS_FILE.match(p.name)]
        ranks, watches, dumps = _classify([p for p in files if p not in ras_files])
        for p in ras_files:
            if ras is not None:
                raise EvidenceError(str(p), f"a second NCCL RAS report (first: {ras.source}): give one")
            try:
                ras = ras_from_dict(_load(p, allow_pickle=False), str(p))
            except RasError as e:
                raise EvidenceError(e.path, e.msg) from None
            sources.append(str(p))
        if not (ranks or watches or dumps or ras_files):
            raise EvidenceError(
                str(arg), "no evidence here (expected rank-<R>.json and watch.json, Flight Recorder dumps, "
                "or an NCCL RAS report ncclras.json)"
            )
        for p in ranks:
            doc = _load(p, allow_pickle=False)
            ev = rank_from_dict(doc, str(p))
            want = int(RANK_FILE.match(p.name).group(1))  # type: ignore[union-attr]
            if ev.rank != want:
                raise EvidenceError(str(p), f"holds rank {ev.rank}, but its name says rank {want}")
            rank_evs.append(ev)
        for p, rank in dumps:
            doc = _load(p, allow_pickle)
            if isinstance(doc, dict) and doc.get("format") in (EVIDENCE_FORMAT, WATCH_FORMAT):
                raise EvidenceError(
                    str(p), f"a {doc['format']} file under another name: expected rank-<R>.json / watch.json"
                )
            rank_evs.append(torch_dump_from_dict(doc, str(p), rank))
        for p in watches:
            w = watch_from_dict(_load(p, allow_pickle=False), str(p))
            if watch is not None:
                raise EvidenceError(str(p), f"a second watch.json (first: {watch.source}): one job at a time")
            watch = w
        sources += [str(p) for p in ranks + watches] + [str(p) for p, _ in dumps]
    return combine(rank_evs, watch, sources, ras)
