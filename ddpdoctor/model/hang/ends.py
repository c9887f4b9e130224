"""How a rank died, from what faulthandler wrote when a fatal signal killed it (pure).

faulthandler (enabled in every rank by `ddpdoctor watch` unless the script enabled it itself) writes
on SIGSEGV, SIGFPE, SIGABRT, SIGBUS and SIGILL::

    Fatal Python error: Aborted

    Thread 0x00007f3a (most recent call first):
      File "/w/train.py", line 12 in step
      ...
    Current thread 0x00007f3b (most recent call first):
      <no Python frame>

The main thread is the one whose outermost frame is a module's top level (``<module>``): a C++
thread of the backend (gloo aborts from its own thread) holds no Python frame at all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# faulthandler's words -> (signal name, number on Linux)
FATAL = {
    "Aborted": ("SIGABRT", 6),
    "Segmentation fault": ("SIGSEGV", 11),
    "Floating point exception": ("SIGFPE", 8),
    "Bus error": ("SIGBUS", 7),
    "Illegal instruction": ("SIGILL", 4),
}
_HEAD = re.compile(r"Fatal Python error: (.+)")
_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-f]+)", re.IGNORECASE)
_FRAME = re.compile(r'^\s+File "(.+)", line (\d+) in (.+)$')


@dataclass(frozen=True)
class FatalSignal:
    signal: str  # "SIGABRT"
    signum: int
    message: str  # "Fatal Python error: Aborted"
    frames: tuple[tuple[str, int, str], ...]  # (file, line, function) of the main thread, outermost first


def parse_fault(text: str, skip_file: str = "") -> FatalSignal | None:
    """The fatal signal and the main thread's stack in a faulthandler report, or None."""
    head = next((m for line in text.splitlines() if (m := _HEAD.match(line.strip()))), None)
    if head is None:
        return None
    what = head.group(1).strip()
    name, num = next(((n, v) for k, (n, v) in FATAL.items() if what.startswith(k)), ("signal", 0))
    threads: list[list[tuple[str, int, str]]] = []
    for line in text.splitlines():
        if _THREAD.match(line.strip()):
            threads.append([])
        elif threads and (m := _FRAME.match(line)):
            threads[-1].append((m.group(1), int(m.group(2)), m.group(3).strip()))
    # faulthandler lists innermost first; the main thread ends at a module's top level
    mains = [t for t in threads if t and t[-1][2] == "<module>" and not any(skip_file and f[0] == skip_file
                                                                               for f in t)]  # fmt: skip
    main = mains[0] if mains else next((t for t in threads if t), [])
    return FatalSignal(name, num, f"Fatal Python error: {what}", tuple(reversed(main)))
