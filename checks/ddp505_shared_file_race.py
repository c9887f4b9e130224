"""DDP505: every rank writes the same file or creates the same folder.

## What it does
Finds, in a distributed script, file-system writes that every rank reaches with the same path
(also a writer of another module handed a table or text file, `update_summary(..., "summary.csv")`):
`os.makedirs`/`os.mkdir`/`Path.mkdir` without `exist_ok=True` (also behind an
`if not os.path.exists(...)` check), `shutil.rmtree` without `ignore_errors=True`, a torchvision
(torchaudio, torchtext) dataset built with `download=True` and a PyG or OGB dataset (which downloads
and preprocesses whenever its files are missing), not after a barrier, `open(path, "w")`
and `Path.write_text`, `np.save`, a matplotlib `savefig`, an image or audio file (`save_image`,
`cv2.imwrite`, `torchaudio.save`), a pandas `to_csv` (`to_json`, ...), `save_pretrained` of any library, an object's
`save(path)` to a picture, table or text file (`plot_logger.save(join(out, "loss.svg"))`) and a
library's save of an object to one (`OmegaConf.save(cfg, join(out, "config.yaml"))`), a copy
(`shutil.copyfile`, `copy`, `copy2`, `copytree` without `dirs_exist_ok=True`) into the same
destination and a move (`shutil.move`, `os.rename`, `os.replace`) of the same source. Writes
under a rank test
(also through this file's helper functions or an early `return`), paths that name the rank, host
or process are left alone. `open(path, "a")` on every rank is reported too: the ranks'
lines interleave in one file. `torch.save` is DDP501.

## Why is this bad?
The ranks start together, so they race: `makedirs` without `exist_ok` raises `FileExistsError` on
every rank that loses (the job dies at startup, only when the folder is new), a late rank's
`open(..., "w")` truncates what rank 0 already logged, and N ranks writing one model file on shared
storage interleave into a corrupt file that fails only when it is loaded.

## Example
```python
dist.init_process_group("nccl")
if not os.path.exists(args.outdir):
    os.makedirs(args.outdir)
with open(os.path.join(args.outdir, "train.log"), "w") as f:
    f.write("start\\n")
```

## Use instead
```python
os.makedirs(args.outdir, exist_ok=True)
if dist.get_rank() == 0:
    with open(os.path.join(args.outdir, "train.log"), "w") as f:
        f.write("start\\n")
dist.barrier()
```
"""

from __future__ import annotations

import ast
import re

from ddpdoctor.script.apart import class_apart_from_distributed
from ddpdoctor.script.foreign import (
    callee,
    entering_call,
    foreign_events,
    guarded_on_the_way,
    place,
    reported_there,
)
from ddpdoctor.script.names import dotted, names_one_rank_output, path_extension
from ddpdoctor.script.nodes import walk
from ddpdoctor.script.ranks import assignments, assignments_seen_at, spawn_calls
from ddpdoctor.script.sync_calls import first_process_block
from ddpdoctor.script.writers import (
    WRITING_LIBRARIES,
    enclosing_statements,
    every_rank_reaches,
    per_process_path,
)

CODE = "DDP505"
TITLE = "Every rank writes the same file or folder"
KIND = "script"
SEVERITY = "warning"
CONFIDENCE = "high"

_NUMPY_SAVES = ("numpy.save", "numpy.savez", "numpy.savez_compressed", "numpy.savetxt")
# image writers -> the position of their path argument
_IMAGE_WRITES = {
    "torchvision.utils.save_image": 1,
    "cv2.imwrite": 0,
    "imageio.imwrite": 0,
    "imageio.v2.imwrite": 0,
    "imageio.imsave": 0,
    "skimage.io.imsave": 0,
    "matplotlib.pyplot.imsave": 0,
    # audio files: the argument that names the file
    "torchaudio.save": 0,
    "soundfile.write": 0,
    "scipy.io.wavfile.write": 0,
}
_MODE = re.compile(r"^[rwxabt+]{1,3}$")
_FILE_ERRORS = ("FileExistsError", "FileNotFoundError", "OSError", "IOError")
_CATCH_ALL = ("Exception", "BaseException")


# datasets that fetch their files on construction with download=True, with no lock between processes
_DOWNLOADERS = ("torchvision.datasets.", "torchaudio.datasets.", "torchtext.datasets.")
# ... and those that download and preprocess into `root` whenever the files are missing, with no flag
# and no lock (PyG's Dataset runs its download() and process() in __init__; OGB's Pyg*/Dgl* datasets too)
_ALWAYS_DOWNLOADERS = (
    "torch_geometric.datasets.",
    "ogb.graphproppred.",
    "ogb.nodeproppred.",
    "ogb.linkproppred.",
    "ogb.lsc.",
)


_DOWNLOAD_HINT = (
    "download on rank 0 first (`if dist.get_rank() == 0:` build it), `dist.barrier()`, then build "
    "it on every rank"
)


def _after_barrier(m, call: ast.Call) -> bool:
    """A barrier earlier in the same function: the rank-0-downloads-first idiom, where the others
    construct the dataset once the files are there (download=True then only checks them)."""
    fn = m.enclosing_function(call)
    return any(
        b.lineno < call.lineno and m.enclosing_function(b) is fn
        for b in (*m.dist_calls("barrier"), *m.method_calls("barrier"), *m.method_calls("wait_for_everyone"))
    )


def _downloads(q: str, call: ast.Call) -> bool:
    """The dataset this constructor builds fetches its files into its root when they are missing."""
    if q.startswith(_DOWNLOADERS):
        return _const(_kw(call, "download")) is True
    last = q.rsplit(".", 1)[-1]
    # a class (not a module function such as `torch_geometric.datasets.utils...`), and not the
    # generated in-memory ones
    return q.startswith(_ALWAYS_DOWNLOADERS) and last[:1].isupper() and not last.startswith("Fake")


def _class_held(m, call: ast.Call) -> str | None:
    """``dataset(root=..., download=True)`` where ``dataset`` was set to a class earlier in the
    function (``dataset = datasets.MNIST`` in one arm, ``datasets.CIFAR10`` in the other): that
    class's qualified name, when every such assignment names the same kind of class."""
    if not isinstance(call.func, ast.Name):
        return None
    fn = m.enclosing_function(call)
    made = [
        v
        for v, node in assignments(m, call.func.id)
        if node.lineno < call.lineno and m.enclosing_function(node) is fn
    ]
    names = [m.qualname(v) if isinstance(v, (ast.Name, ast.Attribute)) else None for v in made]
    if not names or any(n is None for n in names):
        return None
    prefixes = {n.rsplit(".", 1)[0] for n in names}
    return names[0] if len(prefixes) == 1 else None


def _subclassed(m, call: ast.Call) -> str | None:
    """``ProxyFashionMNIST("./data", download=True)`` where this file's class extends a dataset that
    downloads (``class ProxyFashionMNIST(datasets.FashionMNIST)``): that dataset's qualified name."""
    if not isinstance(call.func, ast.Name):
        return None
    for c in m.nodes(ast.ClassDef):
        if c.name == call.func.id:
            for b in c.bases:
                q = m.qualname(b) or ""
                if q.startswith(_DOWNLOADERS + _ALWAYS_DOWNLOADERS):
                    return q
    return None


def _kw(call: ast.Call, name: str) -> ast.AST | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _const(node) -> object:
    return node.value if isinstance(node, ast.Constant) else None


def _handles_exists(m, node) -> bool:
    """Inside ``try:`` whose handler catches FileExistsError (or broader): the race is handled.
    Also under a file lock the ranks take in turn (``with FileLock(path):``, or ``fcntl.flock(f,
    fcntl.LOCK_EX)`` earlier in the ``with open(lock)`` block): they write one after another."""
    return _under_file_lock(m, node) or any(
        isinstance(st, ast.Try)
        and any(_handles(h, st) for h in st.handlers)
        and any(b.lineno <= node.lineno <= b.end_lineno for b in st.body)
        for st in enclosing_statements(m, node)
    )


def _handles(handler: ast.ExceptHandler, st: ast.Try) -> bool:
    """A handler of the file errors; a catch-all (``except Exception:``) only around a few steps:
    one around a whole training loop is there to report a crash, not to survive the race."""
    if handler.type is not None and any(n in ast.unparse(handler.type) for n in _FILE_ERRORS):
        return True
    broad = handler.type is None or any(n in ast.unparse(handler.type) for n in _CATCH_ALL)
    return broad and not any(isinstance(n, (ast.For, ast.AsyncFor, ast.While)) for b in st.body for n in ast.walk(b))


_LOCKS = frozenset(("FileLock", "SoftFileLock", "UnixFileLock", "InterProcessLock"))


def _under_file_lock(m, node) -> bool:
    for a in m.ancestors(node):
        if not isinstance(a, (ast.With, ast.AsyncWith)):
            continue
        for item in a.items:
            e = item.context_expr
            if isinstance(e, ast.Call) and (dotted(e.func) or "").rsplit(".", 1)[-1] in _LOCKS:
                return True
        # `with open(lock_file) as f: fcntl.flock(f, fcntl.LOCK_EX)` before the write
        if any(
            isinstance(c, ast.Call)
            and m.qualname(c.func) in ("fcntl.flock", "fcntl.lockf")
            and "LOCK_EX" in ast.unparse(c)
            and c.lineno < node.lineno
            for st in a.body
            for c in ast.walk(st)
        ):
            return True
    return False


_TABLE_WRITES = frozenset(("to_csv", "to_json", "to_parquet", "to_pickle", "to_excel", "to_feather"))


def _writes(m):
    """(call, path expression, what it does) for each write this rule knows."""
    for call, q in m.calls:
        f = call.func
        last = q.rsplit(".", 1)[-1] if q else (f.attr if isinstance(f, ast.Attribute) else None)
        if q in ("os.makedirs", "os.mkdir") or (last == "mkdir" and isinstance(f, ast.Attribute)):
            if _const(_kw(call, "exist_ok")) is True or (q == "os.makedirs" and len(call.args) > 2):
                continue
            if q in ("os.makedirs", "os.mkdir"):
                path = call.args[0] if call.args else _kw(call, "name") or _kw(call, "path")
            else:
                path = f.value  # pathlib: Path(p).mkdir()
            exist_ok = _kw(call, "exist_ok")
            how = (
                f"with `exist_ok={ast.unparse(exist_ok)}` (not always True):"
                if exist_ok is not None and not isinstance(exist_ok, ast.Constant)
                else "without `exist_ok=True`:"
            )
            yield (call, path, "creates", f"{how} the ranks that lose the race get FileExistsError")
        elif q == "open" or (
            last == "open"
            and isinstance(f, ast.Attribute)
            and (dotted(f.value) or "").split(".")[0] not in m.aliases
        ):
            # builtin open(path, mode) or pathlib's Path(p).open(mode)
            mode = call.args[1] if q == "open" and len(call.args) > 1 else _kw(call, "mode")
            if q != "open" and call.args:
                mode = call.args[0]
            mode = _const(mode)
            if isinstance(mode, str) and _MODE.match(mode) and ("w" in mode or "x" in mode):
                path = (call.args[0] if call.args else _kw(call, "file")) if q == "open" else f.value
                yield (
                    call,
                    path,
                    "truncates",
                    f"(mode {mode!r}): a late rank wipes what another already wrote",
                )
            elif isinstance(mode, str) and _MODE.match(mode) and "a" in mode:
                path = (call.args[0] if call.args else _kw(call, "file")) if q == "open" else f.value
                yield (
                    call,
                    path,
                    "appends to",
                    f"(mode {mode!r}): each rank adds its own lines, so the file holds world-size "
                    "interleaved copies, each of one rank's numbers",
                )
        elif q in ("logging.FileHandler", "logging.basicConfig"):
            # a log file opened for writing: `FileHandler(path, "w")`, `basicConfig(filename=path,
            # filemode="w")` (the default mode "a": a logger's records are each rank's own lines, left alone)
            handler = q == "logging.FileHandler"
            mode = _const(
                (call.args[1] if handler and len(call.args) > 1 else None)
                or _kw(call, "mode" if handler else "filemode")
            )
            path = (call.args[0] if handler and call.args else None) or _kw(call, "filename")
            if path is not None and isinstance(mode, str) and "w" in mode:
                yield call, path, "truncates", f"(log mode {mode!r}): a late rank wipes what another already logged"
        elif last in ("write_text", "write_bytes") and isinstance(f, ast.Attribute):
            yield (
                call,
                f.value,
                "overwrites",
                "at the same time: the last writer wins, partial files in between",
            )
        elif (
            (q and (_downloads(q, call) or _downloads(_class_held(m, call) or "", call)))
            or _downloads(_subclassed(m, call) or "", call)
        ) and not _after_barrier(m, call):
            # OGB's datasets take the name first and the root as a keyword
            kind = q if q and q.startswith(("ogb.", *_DOWNLOADERS)) else _subclassed(m, call) or q or ""
            first = call.args[0] if call.args and not kind.startswith("ogb.") else None
            yield (
                call,
                _kw(call, "root") or first,
                "downloads into",
                "at the same time: the ranks write and extract the same archive together, which "
                "corrupts it or fails the integrity check on a fresh folder",
            )
        elif q in _COPIES and (len(call.args) > 1 or _kw(call, "dst") is not None):
            if q == "shutil.copytree" and _const(_kw(call, "dirs_exist_ok")) is True:
                continue
            yield (
                call,
                call.args[1] if len(call.args) > 1 else _kw(call, "dst"),
                "copies into",
                "at the same time: the copies interleave into a partial file (a tree copy raises "
                "FileExistsError on the ranks that come second)",
            )
        elif q in _MOVES and call.args:
            yield (
                call,
                call.args[0],
                "moves",
                "away: the first rank moves it, the others get FileNotFoundError",
            )
        elif q == "shutil.rmtree" and call.args:
            if _const(_kw(call, "ignore_errors")) is True or len(call.args) > 1:
                continue
            yield (
                call,
                call.args[0],
                "removes",
                "without `ignore_errors=True`: the ranks that lose the race get FileNotFoundError, "
                "and a late rank deletes what another has already made again",
            )
        elif last == "savefig" and isinstance(f, ast.Attribute) and (call.args or _kw(call, "fname")):
            # plt.savefig / fig.savefig: each rank draws its own curve into the same image file
            path = call.args[0] if call.args else _kw(call, "fname")
            yield call, path, "overwrites", "at the same time: the last writer wins, partial images in between"
        elif last in _TABLE_WRITES and isinstance(f, ast.Attribute) and (call.args or _kw(call, "path_or_buf")):
            # pandas: `log_df.to_csv(f"{check_dir}/training_logs.csv")` after every epoch
            path = call.args[0] if call.args else _kw(call, "path_or_buf")
            yield call, path, "overwrites", "at the same time: the last writer wins, partial files in between"
        elif q in _IMAGE_WRITES and len(call.args) > _IMAGE_WRITES[q]:
            # `save_image(grid, "out/result.png")` on every rank: each its own picture, one file
            path = call.args[_IMAGE_WRITES[q]]
            yield call, path, "overwrites", "at the same time: the last writer wins, partial images in between"
        elif q in _NUMPY_SAVES and call.args:
            yield call, call.args[0], "writes", "at the same time: interleaved writes corrupt it"
        elif (
            last == "save"
            and isinstance(f, ast.Attribute)
            and (q or "").split(".", 1)[0] not in ("torch", "numpy")
            and (target := _output_file_arg(m, call, f)) is not None
        ):
            # `plot_logger.save(os.path.join(out, "logger.svg"))`, `img.save(f"{out}/grid.png")`: an
            # object saving itself to a picture or table file; a library saving an object to one
            # (`OmegaConf.save(cfg, out / "config.yaml")`). Checkpoints are DDP501's.
            yield call, target, "overwrites", "at the same time: the last writer wins, partial files in between"
        elif last == "save_pretrained" and isinstance(f, ast.Attribute):
            if _kw(call, "is_main_process") is not None or _kw(call, "save_function") is not None:
                continue  # the library is told which process writes
            path = call.args[0] if call.args else _kw(call, "save_directory")
            yield call, path, "writes", "at the same time: interleaved writes corrupt the files"
        elif (target := _helper_output_file(m, call)) is not None:
            # `update_summary(epoch, ..., os.path.join(output_dir, "summary.csv"))`: another module's
            # writer handed a table or text file
            yield call, target, "writes into", "at the same time: their lines interleave and repeat, or the last writer wins"


# what another module's function named like this does with a file it is handed: write it
_WRITER_NAME = re.compile(r"(?:write|save|dump|update|append|log|export|plot)_")


def _helper_output_file(m, call: ast.Call) -> ast.AST | None:
    """The output file (a table, text or picture, by its extension) handed to a writer of another
    module (``update_summary(..., join(out, "summary.csv"))``, ``save_results(res, "preds.json")``,
    ``utils.save_json(vars(args), join(out, "configs.json"))``), also through a name the function
    set to such a path (``cfg_path = join("logs", "config.yml")`` then ``save_config(cfg, cfg_path)``)."""
    f = call.func
    if isinstance(f, ast.Name):
        name = f.id
        if name in m.function_names or not _WRITER_NAME.match(name.lower()):
            return None
    elif isinstance(f, ast.Attribute) and _project_module(m, f.value):
        # `utils.save_json(...)`, `io_util.save_config(...)`: a module's function, named for
        # writing a file it is handed (`update_`, `log_` and `plot_` of a module may send elsewhere)
        name = f.attr
        if not _MODULE_WRITER_NAME.match(name.lower()):
            return None
    else:
        return None
    if names_one_rank_output(name):
        return None  # `save_rank(text, "log.txt")`: the helper writes on one rank, by its name
    if (m.qualname(f) or "").split(".", 1)[0] in (*WRITING_LIBRARIES, "yaml"):
        return None  # a library's writer: handled above, or its own rule
    for a in (*call.args, *(k.value for k in call.keywords)):
        if path_extension(a) in _OUTPUT_FILES:
            return a
        if isinstance(a, ast.Name):
            seen = assignments_seen_at(m, a)
            if len(seen) == 1 and path_extension(seen[0][0]) in _OUTPUT_FILES:
                return a
    return None


# a module's function named like this writes the file it is handed
_MODULE_WRITER_NAME = re.compile(r"(?:write|save|dump)_")
# services a run reports to: their `save_`/`log_` functions upload, they write no shared file
_TRACKERS = frozenset(("wandb", "mlflow", "neptune", "comet_ml", "clearml", "aim", "swanlab", "tensorboard"))


def _project_module(m, e: ast.AST) -> bool:
    """``e`` names a module this file imports (``utils``, ``dvd.utils``), not a tracking service."""
    root = (dotted(e) or "").split(".", 1)[0]
    if not root or root not in m.aliases:
        return False
    return (m.qualname(e) or root).split(".", 1)[0] not in _TRACKERS


def _output_file_arg(m, call: ast.Call, f: ast.Attribute) -> ast.AST | None:
    """The path a ``.save(...)`` call writes a picture, table or text file to: the first argument of
    an object's own save, the second of a module's that saves an object (``OmegaConf.save(cfg,
    path)``; ``wandb.save(path)`` uploads a file, it does not write one)."""
    module = (dotted(f.value) or "").split(".")[0] in m.aliases
    at = 1 if module else 0
    if len(call.args) > at and path_extension(call.args[at]) in _OUTPUT_FILES:
        return call.args[at]
    if len(call.args) > 1 and m.qualname(f) in _TEXT_ONLY_SAVES:
        return call.args[1]  # a YAML file whatever the path's name says (`args.config_save_path`)
    return None


# library saves that only ever write a text file (never a checkpoint)
_TEXT_ONLY_SAVES = frozenset(("omegaconf.OmegaConf.save",))


# files written for people and tools to read, not checkpoints
_OUTPUT_FILES = frozenset(
    (".svg", ".png", ".jpg", ".jpeg", ".gif", ".pdf", ".html", ".json", ".txt", ".csv", ".tsv", ".yaml", ".yml",
     ".wav", ".mp3", ".flac", ".mp4")
)


def _beside_torch_save(m, call: ast.Call) -> bool:
    """A ``torch.save`` every rank reaches in the same function: DDP501 reports that one, and the
    copy of its file is the same cause. (Where every save there is guarded, an unguarded copy of the
    file they write is a race of its own.)"""
    fn = m.enclosing_function(call)
    return any(
        m.enclosing_function(s) is fn and every_rank_reaches(m, s) and m.rank_guard(s) is None
        for s in m.calls_named("torch.save")
    )


_FN = (ast.FunctionDef, ast.AsyncFunctionDef)
# copies every rank makes to the same destination, and moves whose source only the first rank finds
_COPIES = frozenset(("shutil.copyfile", "shutil.copy", "shutil.copy2", "shutil.copytree"))
_MOVES = frozenset(("shutil.move", "os.rename", "os.replace"))


def _made_first_then_found(m, call: ast.Call) -> bool:
    """``with torch_distributed_zero_first(rank): if not os.path.exists(p): write p``: the first
    process writes it while the others wait at the block's barrier, then they find it and read."""
    block = first_process_block(m, call)
    if block is None:
        return False
    return any(
        isinstance(a, ast.If) and a.lineno >= block.lineno and "exists" in ast.unparse(a.test)
        for a in m.ancestors(call)
    )


def _written_on_one_rank(m, call: ast.Call) -> bool:
    """``f = open(p, "a+")`` on every rank, but every ``f.write(...)`` (and ``print(..., file=f)``)
    under a rank test: opening to append writes nothing, and one rank does the writing."""
    handle = m.assigned_to(call)
    if handle is None:
        holder = next((a for a in m.ancestors(call) if isinstance(a, (ast.With, ast.AsyncWith))), None)
        item = next((i for i in holder.items if i.context_expr is call), None) if holder is not None else None
        handle = dotted(item.optional_vars) if item is not None and item.optional_vars is not None else None
    if handle is None:
        return False
    writes = [
        c
        for c, _q in m.calls
        if (isinstance(c.func, ast.Attribute) and c.func.attr in ("write", "writelines") and dotted(c.func.value) == handle)
        or (dotted(c.func) == "print" and any(k.arg == "file" and dotted(k.value) == handle for k in c.keywords))
    ]
    return bool(writes) and all(m.rank_guard(c) is not None for c in writes)


def _made_by_the_caller_first(m, call: ast.Call, path: ast.AST) -> bool:
    """``if not os.path.exists(out): os.makedirs(out)`` in ``main(args)`` whose every call follows,
    in the caller's own block, a ``Path(args.output_dir).mkdir(parents=True, exist_ok=True)`` of the
    same setting (DETR's ``__main__``): the folder is there before any rank tests for it, so the
    racy ``makedirs`` never runs."""
    fn = m.enclosing_function(call)
    if fn is None or not any(isinstance(a, ast.If) and "exists" in ast.unparse(a.test) for a in m.ancestors(call)):
        return False
    settings = _settings(m, path, fn)
    sites = m.call_sites(fn)
    if not settings or not sites:
        return False
    for site in sites:
        stmt, block = m.statement_in_block(site)
        if block is None:
            return False
        before = block[: block.index(stmt)]
        made = [
            c
            for st in before
            for c in walk(st)
            if isinstance(c, ast.Call)
            and (c.func.attr if isinstance(c.func, ast.Attribute) else dotted(c.func)) in ("mkdir", "makedirs")
            and _settings(m, c, None) & settings
        ]
        if not made:
            return False
    return True


def _settings(m, e: ast.AST, fn) -> set[str]:
    """The attribute paths an expression reads (``args.output_dir``), through one local assignment
    in ``fn`` (``output_dir = Path(args.output_dir)``)."""
    out = {d for n in walk(e) if isinstance(n, ast.Attribute) and (d := dotted(n)) and "." in d and not d.startswith(("os.", "Path."))}
    if fn is not None:
        names = {n.id for n in walk(e) if isinstance(n, ast.Name)}
        for st in walk(fn):
            if isinstance(st, ast.Assign) and any(isinstance(t, ast.Name) and t.id in names for t in st.targets):
                out |= _settings(m, st.value, None)
    return out


def _made_before_spawn(m, call) -> bool:
    """A folder made by the module's top-level code in a script that starts its ranks with
    ``mp.spawn``: the parent runs that code alone before any rank exists, so when the ranks import
    the module again the folder is there and their ``exists`` test skips the call (without that
    test each of them would fail on it: not this race). Only on one node: on several, every node's
    parent runs that code at once."""
    if m.enclosing_function(call) is not None or not spawn_calls(m) or not m.single_node:
        return False
    tests = [ast.unparse(a.test) for a in m.ancestors(call) if isinstance(a, ast.If)]
    return not any("__name__" in t for t in tests) and any("exists" in t or "isdir" in t for t in tests)


def check(m):
    if m.one_process:  # init_process_group(world_size=1): no other rank to collide with
        return
    if not m.is_training_script and not m.distributed_context:  # (get_rank() makes it distributed)
        return
    seen: set[int] = set()
    roots: set[tuple] = set()
    blocks: set[tuple] = set()

    def q_of(call):
        return m.qualname(call.func)

    for call, path, verb, why in _writes(m):
        if call.lineno in seen or per_process_path(path, m) or _handles_exists(m, call):
            continue
        if path is not None and "devnull" in ast.unparse(path):
            continue
        if not every_rank_reaches(m, call) or class_apart_from_distributed(m, call):
            continue
        if verb == "creates" and _made_before_spawn(m, call):
            continue
        if _made_first_then_found(m, call):
            continue
        if verb == "creates" and path is not None and _made_by_the_caller_first(m, call, path):
            continue
        if verb == "appends to" and _written_on_one_rank(m, call):
            continue
        if verb == "copies into" and _beside_torch_save(m, call):
            continue  # `torch.save(state, f); if is_best: copyfile(f, best)`: one cause, DDP501's
        if q_of(call) in _IMAGE_WRITES:
            # pictures or sound clips a block writes one after another: one habit, one finding
            block = next((a for a in m.ancestors(call) if isinstance(a, (ast.If, ast.For, ast.While, *_FN))), None)
            key = (id(block), q_of(call))
            if key in blocks:
                continue
            blocks.add(key)
        if verb in ("writes into", "appends to") and path is not None:
            # one log or table that a function writes to line after line: one race, at the first
            # (an append log: one file across the whole script, however many functions add to it,
            # and one habit for the several logs a function appends to)
            key = (id(m.enclosing_function(call)), verb, ast.unparse(path))
            if verb == "appends to":
                keys = {(None, verb, ast.unparse(path)), (id(m.enclosing_function(call)), verb)}
                if keys & roots:
                    continue
                roots.update(keys)
            elif key in roots:
                continue
            else:
                roots.add(key)
        if verb == "downloads into" and path is not None:
            # the train and test splits fetched into one root: one race, reported at the first
            key = (id(m.enclosing_function(call)), ast.unparse(path))
            if key in roots:
                continue
            roots.add(key)
        seen.add(call.lineno)
        target = ast.unparse(path) if path is not None else (dotted(call.func) or "it")
        yield m.finding(
            CODE,
            call,
            f"every rank {verb} `{target}` {why}",
            SEVERITY,
            hint=_DOWNLOAD_HINT
            if verb == "downloads into"
            else "write on rank 0 only (`if dist.get_rank() == 0:`) then `dist.barrier()`; "
            "`os.makedirs(..., exist_ok=True)` for folders",
        )
    yield from _writes_in_other_files(m)


def _writes_in_other_files(m):
    """Project mode: a write of another file (a helper's ``makedirs`` without ``exist_ok``) that
    several ranks reach through a call here. Reported at that call, naming the write and, when the
    helper is called from a third file, the line where the rank test belongs."""
    for fe in foreign_events(m, "fs"):
        call, other = fe.event.node, fe.other
        found = next(((p, verb, why) for c, p, verb, why in _writes(other) if c is call), None)
        if found is None or guarded_on_the_way(m, fe):
            continue
        path, verb, why = found
        # only folder creation: its loser crashes with FileExistsError whatever the content; a shared
        # file a helper rewrites is often rewritten with the same content, or behind a "main process
        # first" block of another file that this walk does not see
        if verb != "creates" or per_process_path(path, other) or _handles_exists(other, call):
            continue
        if path is not None and "devnull" in ast.unparse(path):
            continue
        if not any(len(ranks) == run.world_size for run, ranks in fe.reach):
            continue
        if reported_there(check, other, call):
            continue
        name = callee(fe)
        where = place(fe)
        target = ast.unparse(path) if path is not None else (dotted(call.func) or "it")
        enters = entering_call(m, fe)
        via = f", through {enters[0]}:{enters[1]}," if enters is not None else ""
        yield m.finding(
            CODE,
            fe.anchor,
            f"every rank calls `{name}` here{via} and at {where} it {verb} `{target}` {why} "
            f"({m.event_chain(fe.event)})",
            SEVERITY,
            hint="`exist_ok=True` for folders; other writes on rank 0 only, then `dist.barrier()`",
            cause=f"{other.path}:{call.lineno} via {enters}",
        )
