"""The rendezvous watcher reads c10d's pickled state from the store through a restricted unpickler:
the names a real state holds are read, any other name is refused before anything runs."""

from __future__ import annotations

import base64
import datetime
import os
import pickle

import pytest

from ddpdoctor.runtime.rdzv_state import StateError, arrived_addrs, load_state


def _real_state(protocol: int) -> bytes:
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _NodeDesc, _RendezvousState

    s = _RendezvousState()
    a, b, c = _NodeDesc("node-a", 11, 0), _NodeDesc("node-b", 12, 0), _NodeDesc("node-c", 13, 0)
    s.round = 2
    s.participants = {a: 0, b: 1}
    s.wait_list = {c}
    s.redundancy_list = {c}
    s.deadline = datetime.datetime.now(datetime.timezone.utc)
    s.last_heartbeats = {a: datetime.datetime.now(datetime.timezone.utc), c: datetime.datetime.now(datetime.timezone.utc)}
    # as torch's C10dRendezvousBackend stores it: base64 of the pickle
    return base64.b64encode(pickle.dumps(s, protocol=protocol))


@pytest.mark.parametrize("protocol", [3, 4, pickle.HIGHEST_PROTOCOL])  # torch: the default (4 or 5)
def test_a_real_state_names_who_arrived(protocol):
    assert arrived_addrs(_real_state(protocol)) == {"node-a", "node-b", "node-c"}


class _Evil:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("payload", ["bare", "inside_state"])
def test_a_pickle_calling_os_system_is_refused_without_running(tmp_path, payload):
    marker = tmp_path / "ran"
    evil = _Evil(str(marker))
    if payload == "inside_state":
        from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _RendezvousState

        obj = _RendezvousState()
        obj.participants = {"x": evil}
    else:
        obj = evil
    raw = base64.b64encode(pickle.dumps(obj))
    with pytest.raises(StateError, match=r"refused (posix|os|nt)\.system"):
        load_state(raw)
    assert not marker.exists()


@pytest.mark.parametrize("raw", [b"not base64!", base64.b64encode(b"\x80\x04junk"), base64.b64encode(pickle.dumps([1, 2]))])
def test_other_values_are_errors_not_crashes(raw):
    with pytest.raises(StateError):
        load_state(raw)


def test_builtins_other_than_sets_are_refused():
    raw = base64.b64encode(b"cbuiltins\neval\n(S'1+1'\ntR.")
    with pytest.raises(StateError, match="refused builtins.eval"):
        load_state(raw)
