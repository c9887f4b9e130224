"""Record what a real GPU's NVML answers, and play it back to the NVML probe here.

No GPU here or in CI. On a machine with one, ``python -m tests.support.nvml_tape OUT.json`` runs the
probe (``read_nvml``) once through a recorder that writes down every NVML call it makes with its
arguments and the answer (or the error code). A test then hands the probe a :class:`Replay` of that
tape: each call answers exactly as the hardware did, and a call the tape does not hold fails the test,
so a probe change that asks NVML something new is seen instead of answered by a guess.
"""

from __future__ import annotations

import ctypes
import json
import sys
import types
from typing import Any


def _encode(v: Any, handles: dict[int, int]) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v  # before the handle test: a double's handles may be plain ints
    if id(v) in handles:
        return {"handle": handles[id(v)]}
    if isinstance(v, bytes):
        return {"bytes": v.decode("latin-1")}
    if isinstance(v, ctypes.Structure):
        return {"struct": {f[0]: _encode(getattr(v, f[0]), handles) for f in v._fields_}}
    if isinstance(v, types.SimpleNamespace):  # the recorded doubles' structs
        return {"struct": {k: _encode(x, handles) for k, x in vars(v).items()}}
    if isinstance(v, (list, tuple)) or (hasattr(v, "__len__") and hasattr(v, "__getitem__") and not isinstance(v, str)):
        return [_encode(x, handles) for x in v]
    return {"repr": repr(v)}


class Recorder:
    """Stands in for ``pynvml``: passes every call through and writes down what it answered."""

    def __init__(self, nvml: types.ModuleType):
        self._nvml = nvml
        self._handles: dict[int, int] = {}
        self._keep: list[Any] = []  # handles stay alive so their id() stays theirs
        self.calls: list[dict[str, Any]] = []
        self.constants: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._nvml, name)
        if not (name.startswith("nvml") and callable(real)):
            if name.startswith("NVML_"):
                self.constants[name] = _encode(real, self._handles)
            return real  # constants, NVMLError

        def call(*args):
            row: dict[str, Any] = {"fn": name, "args": [_encode(a, self._handles) for a in args]}
            self.calls.append(row)
            try:
                out = real(*args)
            except self._nvml.NVMLError as e:
                row["error"], row["message"] = int(e.value), str(e)
                raise
            if name == "nvmlDeviceGetHandleByIndex" and not isinstance(out, int):
                self._handles[id(out)] = int(args[0])
                self._keep.append(out)
            row["result"] = _encode(out, self._handles)
            return out

        return call


class _Handle:
    def __init__(self, index: int):
        self.index = index


def _decode(v: Any, handles: dict[int, _Handle]) -> Any:
    if isinstance(v, list):
        return [_decode(x, handles) for x in v]
    if isinstance(v, dict):
        if "handle" in v:
            return handles.setdefault(v["handle"], _Handle(v["handle"]))
        if "bytes" in v:
            return v["bytes"].encode("latin-1")
        if "struct" in v:
            return types.SimpleNamespace(**{k: _decode(x, handles) for k, x in v["struct"].items()})
    return v


class Replay:
    """A ``pynvml`` whose functions and constants answer from a tape; its NVMLError is pynvml's."""

    def __init__(self, tape: dict[str, Any]):
        import pynvml

        self._nvml = pynvml
        self.NVMLError = pynvml.NVMLError
        self._handles: dict[int, _Handle] = {}
        self._answers: dict[tuple[str, str], dict[str, Any]] = {}
        self._constants = tape.get("constants", {})
        for row in tape["calls"]:
            self._answers.setdefault((row["fn"], json.dumps(row["args"])), row)

    def _key(self, a: Any) -> Any:
        return {"handle": a.index} if isinstance(a, _Handle) else a

    def __getattr__(self, name: str) -> Any:
        if name in self._constants:
            return _decode(self._constants[name], self._handles)
        if name.startswith("NVML_"):
            raise AttributeError(name)  # the probe read none: it took its own default
        if not name.startswith("nvml"):
            return getattr(self._nvml, name)
        if not any(fn == name for fn, _ in self._answers):
            raise AttributeError(name)  # the probe treats an absent function as unsupported

        def call(*args):
            key = (name, json.dumps([self._key(a) for a in args]))
            if key not in self._answers:
                raise AssertionError(f"the tape holds no answer to {name}{key[1]}")
            row = self._answers[key]
            if "error" in row:
                raise self._nvml.NVMLError(row["error"])
            return _decode(row["result"], self._handles)

        return call


def record(path: str) -> None:
    import pynvml

    from ddpdoctor.probes.nvml import read_nvml

    rec = Recorder(pynvml)
    try:
        reading = read_nvml(rec)
        outcome = f"{len(reading.gpus)} GPU(s), driver {reading.driver_version}"
    except Exception as e:  # the tape of a failing probe is a fixture too
        outcome = f"{type(e).__name__}: {e}"
    with open(path, "w") as f:
        tape = {"pynvml": getattr(pynvml, "__version__", ""), "outcome": outcome}
        json.dump({**tape, "constants": rec.constants, "calls": rec.calls}, f, indent=1)
    print(outcome)


if __name__ == "__main__":
    record(sys.argv[1])
