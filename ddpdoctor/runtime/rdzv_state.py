"""Who is in a c10d rendezvous, read from the state torchrun's agents keep in the TCP store.

That state is a pickle written by torch.distributed.elastic (`_RendezvousState`), and anything able to
reach the store port can write that key. So it is never unpickled as such: `StateUnpickler` resolves
only the names a rendezvous state holds, each to an inert stand-in of ours (plain attributes, no code of
torch's or anyone's runs) or to a datetime value type, and refuses every other name (`os.system`,
`builtins.eval`, ...) before anything is called.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import io
import pickle
from dataclasses import dataclass
from typing import Any

_RDZV = "torch.distributed.elastic.rendezvous.dynamic_rendezvous"
MAX_STATE_BYTES = 16 << 20  # a 2,048-node state is a few hundred KiB


class StateError(ValueError):
    """The stored value is not a rendezvous state we can read (refused names included)."""


class RendezvousState:
    """Stands in for `_RendezvousState`: its pickled attributes, nothing else."""

    participants: Any = None
    wait_list: Any = None


@dataclass(frozen=True)
class NodeDesc:
    """Stands in for `_NodeDesc` (addr, pid, local_id); hashable, as the state's sets and dict keys need."""

    addr: Any = None
    pid: Any = None
    local_id: Any = None


ALLOWED: dict[tuple[str, str], Any] = {
    (_RDZV, "_RendezvousState"): RendezvousState,
    (_RDZV, "_NodeDesc"): NodeDesc,
    ("datetime", "datetime"): datetime.datetime,  # deadline, last_heartbeats
    ("datetime", "timezone"): datetime.timezone,
    ("datetime", "timedelta"): datetime.timedelta,
    ("builtins", "set"): set,  # protocol 3 builds sets by calling set()
    ("builtins", "frozenset"): frozenset,
}


class StateUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        try:
            return ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"refused {module}.{name}: not part of a rendezvous state") from None

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("refused a persistent id: not part of a rendezvous state")


def load_state(raw: bytes) -> RendezvousState:
    """The store's value (base64 of the pickle) as a `RendezvousState`; StateError when it is not one."""
    if len(raw) > MAX_STATE_BYTES * 4 // 3 + 4:
        raise StateError(f"rendezvous state of {len(raw)} bytes: larger than any real one")
    try:
        data = base64.b64decode(raw, validate=True)
        state = StateUnpickler(io.BytesIO(data)).load()
    except (binascii.Error, pickle.UnpicklingError, EOFError, TypeError, ValueError, AttributeError,
            IndexError, KeyError, RecursionError, MemoryError) as e:
        raise StateError(f"not a rendezvous state: {type(e).__name__}: {e}") from None
    if not isinstance(state, RendezvousState):
        raise StateError(f"not a rendezvous state: a {type(state).__name__}")
    return state


def arrived_addrs(raw: bytes) -> set[str]:
    """The addresses of the nodes that joined (participants) or wait for the next round (wait_list)."""
    state = load_state(raw)
    out: set[str] = set()
    for group in (state.participants, state.wait_list):
        if isinstance(group, (dict, set, frozenset, list)):
            out |= {n.addr for n in group if isinstance(n, NodeDesc) and isinstance(n.addr, str)}
    return out
